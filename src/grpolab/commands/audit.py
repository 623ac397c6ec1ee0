"""``grpolab audit PATH``: report the gradient starvation in the rollout logs of a finished run.

PATH is a grpolab run directory (``rollouts/step-NNNNNN.parquet``), a TRL output directory (``completions/``
written with ``log_completions=True``), or any Parquet / CSV / JSONL table (or directory of them) with a
prompt-id and a reward column. See docs/audit.md and ``grpolab.audit`` for the definitions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.io import check_output_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="run directory, TRL output directory, or a rollout table")
    parser.add_argument(
        "--prompt-column", help="column identifying the prompt (default: prompt_id, uid, prompt, ...)"
    )
    parser.add_argument(
        "--reward-column",
        help="the 0/1 correctness column behind success and pass@k (default: reward, score, correct, ...; "
        "in TRL logs the only 0/1 reward column)",
    )
    parser.add_argument(
        "--advantage-column",
        help="advantage column; a group is degenerate when all its advantages are zero (default: advantage; "
        "'none': when all its rewards are equal)",
    )
    parser.add_argument(
        "--group-size", type=int, help="TRL logs: num_generations (default: from runs of identical prompts)"
    )
    parser.add_argument("--step-column", help="training-step column (default: step, global_step, ...)")
    parser.add_argument("--length-column", help="completion length in tokens (default: length, ...)")
    parser.add_argument(
        "--threshold", type=float, help="a reward >= this is a success; needed for rewards other than 0 and 1"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write a self-contained HTML report")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _check_html_path(path: Path | None) -> None:
    """Refuse, before reading any log, an ``--html`` that names a folder, sits in a folder that is missing, or
    cannot be written."""
    if path is not None:
        check_output_file(path, flag="--html", example="audit.html")


def run(args: argparse.Namespace) -> int:
    from grpolab.audit import audit
    from grpolab.audit.render import render_terminal, write_html
    from grpolab.progress import results_console

    if args.group_size is not None and args.group_size < 1:
        raise UserError(f"--group-size must be >= 1, got {args.group_size}")
    if args.threshold is not None and not math.isfinite(args.threshold):  # nan: every group all-wrong
        raise UserError(f"--threshold must be a finite number, got {args.threshold}; a reward >= it is a success")
    _check_html_path(args.html)
    try:
        result = audit(
            args.path,
            prompt_column=args.prompt_column,
            reward_column=args.reward_column,
            step_column=args.step_column,
            length_column=args.length_column,
            advantage_column=args.advantage_column,
            group_size=args.group_size,
            threshold=args.threshold,
        )
    except UserError:
        raise
    except ValueError as error:  # bad values inside a readable table
        raise UserError(str(error)) from None
    for warning in result["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.html:
        write_html(result, args.html)
    if args.json:
        print(json.dumps(_json_safe(result), indent=2))
    else:
        render_terminal(result, results_console)  # a closed stdout ends quietly (grpolab.cli)
        if args.html:
            print(f"HTML report: {args.html}")
    return 0
