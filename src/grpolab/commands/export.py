"""``grpolab export RUN --out DIR``: write a run as a Hugging Face model folder (LoRA merged into the base weights,
safetensors, config, tokenizer with its chat template, generation config) with a model card naming the run.

RUN is a run directory (its final model, or ``--step N`` for a checkpoint) or a ``grpolab compare`` directory (its
result runs, or those of ``--arm`` and ``--seed``, one folder each under DIR). See ``grpolab.export``.
"""

from __future__ import annotations

import argparse

from grpolab.errors import UserError
from grpolab.progress import results_console as console


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _seeds(text: str) -> list[int]:
    try:
        return [int(part) for part in _names(text)]
    except ValueError:
        raise UserError(f"--seed takes whole numbers separated by commas, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="a run directory (grpolab train --out) or a grpolab compare --out")
    parser.add_argument("--out", required=True, help="the folder to write (one folder per run for a compare "
                                                     "directory); refused when it exists and is not empty")
    parser.add_argument("--step", type=int, help="export the run's checkpoint of this step instead of its final "
                                                 "model (also of a run that has not finished)")
    parser.add_argument("--arm", default="", help="of a compare directory: only these arms (comma-separated, as "
                                                  "--estimators names them, e.g. sign,dr_grpo+dynamic)")
    parser.add_argument("--seed", default="", help="of a compare directory: only these seeds (comma-separated)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an earlier export in --out (refused when --out holds other files)")


def run(args: argparse.Namespace) -> int:
    from grpolab.export import Exported, export

    if args.step is not None and args.step < 1:
        raise UserError(f"--step must be a training step >= 1, got {args.step}")

    def on_run(exported: Exported) -> None:
        console.print(f"{exported.run_dir} (step {exported.step}) -> {exported.folder}")

    written = export(args.run, args.out, step=args.step, arms=_names(args.arm), seeds=_seeds(args.seed),
                     overwrite=args.overwrite, on_run=on_run)
    console.print(f"exported {len(written)} run(s) into {args.out}")
    return 0
