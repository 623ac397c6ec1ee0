"""Print the update-geometry tables of docs/when-sign-helps.md ("The mechanism, measured on the embedded model" and
"On SmolLM2") from the committed per-run measurements of ``grpolab mechanism``.

    python scripts/mechanism_tables.py experiments/mechanism-embedded/middling
    python scripts/mechanism_tables.py experiments/mechanism-embedded/low
    python scripts/mechanism_tables.py "experiments/smollm2/updates/mask_truncated_completions=false" --step-norm

Each folder holds the ``mechanism_runs.csv`` that ``grpolab mechanism`` wrote into the compare's folder (one row
per run and measure; the commands are in the doc and in the folder's README). The summary over seeds is the
command's own (``grpolab.mechanism.summarise``: means with 95% Student-t intervals); this script only picks the
doc's columns: the pass@1 change (points), the successive-update cosine beside its pure-noise value, the
cross-seed cosine, the norm of the total update, with ``--step-norm`` the mean norm of one update, and Adam's
first moment over its noise floor at each kept checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from grpolab.mechanism.summary import summarise

MINUS = "\N{MINUS SIGN}"


def _interval(row: pd.Series, digits: int, scale: float = 1.0, signed: bool = False) -> str:
    sign = "+" if signed else ""
    values = [f"{scale * row[key]:{sign}.{digits}f}" for key in ("mean", "ci_low", "ci_high")]
    return f"{values[0]} [{values[1]}, {values[2]}]".replace("-", MINUS)


def _one(rows: pd.DataFrame, measure: str, phase: str = "") -> pd.Series:
    found = rows[(rows["measure"] == measure) & (rows["phase"].fillna("") == phase)]
    if len(found) != 1:
        raise SystemExit(f"the summary holds {len(found)} rows of {measure!r} {phase!r} for one estimator, not 1")
    return found.iloc[0]


def _adam_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """Adam over its floor at each kept checkpoint ("step N"), by step."""
    steps = rows[(rows["measure"] == "adam_over_floor") & rows["phase"].fillna("").str.startswith("step ")]
    return steps.assign(step=steps["phase"].str.removeprefix("step ").astype(int)).sort_values("step")


def update_table(summary: pd.DataFrame, step_norm: bool = False) -> str:
    """The doc's table: one row per estimator (in the summary's order) of the summary's G."""
    rows = summary[summary["part"].isin(["passk", "updates"])]
    estimators = list(dict.fromkeys(rows["estimator"]))
    noise = _one(rows[rows["estimator"] == estimators[0]], "successive_noise_cosine")["mean"]
    steps = _adam_steps(rows[rows["estimator"] == estimators[0]])["step"].tolist()
    header = [
        "Estimator",
        "pass@1 change",
        f"Successive cosine (noise: {noise:.3f})",
        "Cross-seed cosine (noise: 0)",
        "‖W_end − W_start‖",
        *(["Mean ‖ΔW_k‖"] if step_norm else []),
        "Adam over floor, step " + " / ".join(str(step) for step in steps),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for estimator in estimators:
        own = rows[rows["estimator"] == estimator]
        cells = [
            estimator,
            _interval(_one(own, "pass@1", "change"), 1, 100, signed=True),
            _interval(_one(own, "successive_cosine"), 3),
            _interval(_one(own, "cross_seed_cosine"), 3),
            _interval(_one(own, "update_norm"), 2),
            *([_interval(_one(own, "step_update_norm"), 3)] if step_norm else []),
            " / ".join(f"{value:.2f}" for value in _adam_steps(own)["mean"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder holding grpolab mechanism's mechanism_runs.csv")
    parser.add_argument("--step-norm", action="store_true", help="add the mean norm of one update (Mean ‖ΔW_k‖)")
    args = parser.parse_args(argv)
    runs = args.folder / "mechanism_runs.csv"
    if not runs.is_file():
        parser.error(f"{runs} does not exist: give a folder that holds grpolab mechanism's mechanism_runs.csv")
    print(update_table(summarise(pd.read_csv(runs)), args.step_norm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
