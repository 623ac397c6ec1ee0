#!/usr/bin/env bash
# The GPU check on a bare GPU machine (docs/gpu.md): install the wheels carried in .gpu/wheels (made by
# scripts/gpu_check_prepare.sh) into a temporary folder, put it and this repository's src on PYTHONPATH, go
# offline, and run scripts/gpu_check.py (or, with --numbers first, scripts/gpu_numbers.py; with --sampler-numbers
# first, scripts/gpu_sampler_numbers.py; with --pace first, issue 47's numbers in one call of under 600 s: the
# sampler's numbers in two parts with compare's runs per hour at K = 1 and 4 between them, every part under its own
# limit so that one that runs long cannot take the others' time). Extra arguments go to the script (not with --pace).
set -uo pipefail
cd "$(dirname "$0")/.."
SITE=${GPU_CHECK_SITE:-/tmp/site}
PY=${PYTHON:-python3}
# shellcheck source=scripts/gpu_wheels.sh
. scripts/gpu_wheels.sh
install_gpu_wheels "$SITE" gpu_check.sh
export PYTHONPATH="$SITE:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
if [ "${1:-}" = "--numbers" ]; then
    shift
    exec "$PY" scripts/gpu_numbers.py --out "${OUT:-runs/gpu-numbers}" "$@"
fi
if [ "${1:-}" = "--sampler-numbers" ]; then
    shift
    exec "$PY" scripts/gpu_sampler_numbers.py --out "${OUT:-runs/gpu-sampler-numbers}" "$@"
fi
if [ "${1:-}" = "--pace" ]; then
    out=${OUT:-runs/gpu-pace}
    mkdir -p "$out"
    status=0 smoke=()
    [ "${GPU_PACE_SMOKE:-}" = 1 ] && smoke=(--cpu --tiny)  # the CPU smoke run of this mode: no measurement
    "$PY" scripts/gpu_sampler_numbers.py "${smoke[@]}" --out "$out/sampler-1" --budget-s 300 \
        --sections bandwidth,sampling-smollm2,sampling-smollm2-bf16-stream,kernels,rl-step,update || status=1
    timeout 170 "$PY" benchmarks/bench_runs_per_gpu.py "${smoke[@]:0:1}" --random-shape smollm2-135m-shape --runs-per-gpu 1,4 \
        --seeds 2 --steps 10 --eval-limit 16 --eval-samples 0 --out "$out/runs-per-gpu.json" || status=1
    left=$((560 - SECONDS))
    "$PY" scripts/gpu_sampler_numbers.py "${smoke[@]}" --out "$out/sampler-2" --budget-s "$((left > 5 ? left : 5))" \
        --sections sampling-qwen2.5,compiled || status=1
    exit $status
fi
exec "$PY" scripts/gpu_check.py --out "${OUT:-runs/gpu-check}" "$@"
