#!/usr/bin/env bash
# The GPU check on a bare GPU machine (docs/gpu.md): install the wheels carried in .gpu/wheels (made by
# scripts/gpu_check_prepare.sh) into a temporary folder, put it and this repository's src on PYTHONPATH, go
# offline, and run scripts/gpu_check.py (or, with --numbers first, scripts/gpu_numbers.py; with --sampler-numbers
# first, scripts/gpu_sampler_numbers.py). Extra arguments go to the script.
set -uo pipefail
cd "$(dirname "$0")/.."
SITE=${GPU_CHECK_SITE:-/tmp/site}
PY=${PYTHON:-python3}
if ls .gpu/wheels/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        .gpu/wheels/*.whl || { echo "gpu_check.sh: installing .gpu/wheels failed" >&2; exit 3; }
else
    echo "gpu_check.sh: no wheels in .gpu/wheels (run scripts/gpu_check_prepare.sh where pip works, and carry .gpu)" >&2
fi
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
exec "$PY" scripts/gpu_check.py --out "${OUT:-runs/gpu-check}" "$@"
