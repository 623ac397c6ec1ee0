"""Recompute the SmolLM2 mechanism tables from the committed per-run measurements, without the runs or a model.

    python scripts/smollm2_mechanism_table.py   # experiments/smollm2/mechanism.csv, mechanism.md and
                                                # docs/real-model-figures/mechanism.png from mechanism_runs.csv

``grpolab mechanism runs/smollm2 --prompts 32 --samples 4`` measured ``mechanism_runs.csv`` (one row per run
and measure); the summary over seeds (mean and 95% Student-t CI, ``grpolab.mechanism.summarise``) and its
renderings depend on nothing else, so they can be rebuilt here when the summary changes (as when the
percentile bootstrap over seeds gave way to Student-t intervals). The settings below are those of that
command, as its mechanism.md recorded them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from grpolab.mechanism.render import figure_png, markdown
from grpolab.mechanism.summary import summarise

SETTINGS = {"out": "runs/smollm2", "prompts": 32, "samples": 4, "model": "smollm2-135m", "seed": 0,
            "temperature": 0.7, "correct": 7, "wrong": 121}
FIGURE = "docs/real-model-figures/mechanism.png"  # where the real-model docs link the figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=Path("experiments/smollm2"), help="holds mechanism_runs.csv")
    parser.add_argument("--figure", type=Path, default=Path(FIGURE), help="where mechanism.png goes")
    args = parser.parse_args()
    per_run = pd.read_csv(args.dest / "mechanism_runs.csv")
    summary = summarise(per_run)
    summary.to_csv(args.dest / "mechanism.csv", index=False)
    figure = figure_png(summary)
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    args.figure.write_bytes(figure)
    text = markdown(summary, SETTINGS, None)  # no figure written next to the table: link the docs' copy
    if "updates" not in set(summary["part"]):  # these runs measured no update geometry
        text = text.replace(", the update's geometry", "", 1)
    link = Path("../" * len(args.dest.parts)) / args.figure if not args.figure.is_absolute() else args.figure
    caption = "Per-token change, pass@k before and after, answer format: start and end"
    (args.dest / "mechanism.md").write_text(f"{text.rstrip()}\n\n![{caption}]({link.as_posix()})\n\n*{caption}*\n")


if __name__ == "__main__":
    main()
