"""``grpolab preflight``: sample n completions for each train prompt of a task with a model, and report the
predicted gradient starvation per G, a recommended G and pass-rate band, and the band's train data
(``grpolab.preflight``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from grpolab.commands.evaluate import EVAL_FIELDS
from grpolab.commands.flags import add_config_arguments, config_from_args
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.progress import print_frame, print_text, progress_bar

# Where the pre-flight differs from a training run's evaluations: enough samples for G up to 16, every train prompt.
PREFLIGHT_TRAIN_DEFAULTS: dict[str, Any] = {"eval_samples": 16, "eval_limit": None}
HELP = {"eval_samples": "n: samples per train prompt, at least 2; the shares are predicted for G <= n (default: 16)",
        "eval_limit": "sample at most this many train prompts, the first ones (default: all)"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, TrainConfig, defaults=PREFLIGHT_TRAIN_DEFAULTS, help_overrides=HELP,
                         only=(*EVAL_FIELDS, "progress"))
    parser.add_argument("--out", default="preflight", help="the folder to write into (default: preflight)")
    parser.add_argument("--band", type=_band, metavar="LOW,HIGH",
                        help="the pass-rate band to keep (default: chosen from the recommended G)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _band(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--band takes LOW,HIGH such as 0.2,0.8, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from grpolab.preflight import preflight
    from grpolab.preflight.page import display_table, summary_lines

    config: TrainConfig = config_from_args(args, TrainConfig, file_values=PREFLIGHT_TRAIN_DEFAULTS)
    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    with progress_bar(config.progress) as bar:
        state: dict[str, Any] = {}

        def on_start(total: int) -> None:
            if bar is not None:
                state["task"] = bar.add_task("sampling train prompts", total=total, info="")

        def on_chunk(done: int) -> None:
            if bar is not None:
                bar.advance(state["task"], done)

        result = preflight(config, args.out, band=args.band, on_start=on_start, on_chunk=on_chunk)
    if args.json:
        print(json.dumps(result.to_dict()))
        return _refuse_empty_band(result)
    for line in summary_lines(result):
        print_text(line)
    print_frame(display_table(result.table))
    print_text(f"wrote {', '.join(result.files.values())}")
    return _refuse_empty_band(result)


def _refuse_empty_band(result: Any) -> int:
    """0, or a ``UserError`` (exit 2) when the band holds no prompt: a script's next step, training on band/,
    has nothing to train on; the predictions are printed and written all the same."""
    reason = result.empty_band()
    if reason is None:
        return 0
    raise UserError(f"{reason}; the predictions are in {result.files['summary.json']}; widen --band, or sample the "
                    "model on prompts nearer its level")

