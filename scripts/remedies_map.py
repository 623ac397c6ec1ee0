"""The remedies map: every remedy for gradient starvation beside sign, reinforce and PKPO at equal completions.

    python scripts/remedies_map.py run --out runs/remedies     # one grpolab compare per (level, G), --workers 1
    python scripts/remedies_map.py table --out runs/remedies   # experiments/remedies/*.csv and table.md

The design and the statistics were fixed before the runs in experiments/remedies/README.md. ``run`` drives
``grpolab compare --config experiments/remedies/compare.yaml`` once per (difficulty level, G): the embedded
``reverse`` task at the sign map's levels (``scripts/sign_map.py`` ``LEVELS``), with ``--budget
completions=N``, N = steps x P x G, so that every arm samples the completions that 20 steps of ``dr_grpo``
sample (``dr_grpo+dynamic`` runs fewer steps). A finished sweep is skipped, so an interrupted ``run`` resumes.
``dr_grpo+curriculum`` is not an arm: ``reverse`` streams its prompts and grpolab refuses the curriculum there.

``table`` reads each sweep's ``runs.csv`` (end pass@1 and greedy accuracy per result run) and
``metrics.parquet`` (completions sampled and steps run) and writes

* ``runs.csv``: one row per result run (the inputs of every other table);
* ``cells.csv``: one row per (level, G, arm): the lr and whether it is bracketed, the means over seeds of end
  pass@1, greedy accuracy, completions and steps;
* ``tests.csv``: the paired differences (arm - versus, same seed) with Student-t 95% intervals, raw p and Holm p
  within each family (primary: each remedy vs dr_grpo and vs sign per cell; secondary: sign vs dr_grpo,
  reinforce and pkpo vs dr_grpo and vs sign), on end pass@1, and the same on greedy accuracy (reported, not
  tested: no Holm);
* ``table.md``: all of it, in Markdown, and the pre-registered verdict per remedy.

The paired tests are ``grpolab.stats.paired_t_test`` and ``paired_interval``; Holm is
``grpolab.stats.holm_correction``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.stats import holm_correction, paired_interval, paired_t_test

LEVELS = {  # the sign map's (scripts/sign_map.py); star-len4 and plus are cut for compute (README.md)
    "star-len6": {"markers": "*", "lengths": [6, 6]},
    "mixed": {"markers": "+*", "lengths": [3, 6]},
}
GROUP_SIZES = (2, 4)
STEPS, PROMPTS = 20, 16
REMEDIES = ("dr_grpo+dynamic", "dr_grpo+mask", "dr_grpo+replay")
REFERENCES = ("dr_grpo", "sign")
ARMS = ("dr_grpo", *REMEDIES, "sign", "reinforce", "pkpo")
EXPERIMENT = Path("experiments/remedies")
ALPHA = 0.05


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["run", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/remedies"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=EXPERIMENT, help="where table writes")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated level names")
    parser.add_argument("--group-sizes", default=",".join(map(str, GROUP_SIZES)), help="comma-separated G")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--seeds 2' (smoke tests)")
    return parser.parse_args()


def _cells(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(level, G) in run order: every level at the first G, then at the next."""
    return [(level, int(g)) for g in args.group_sizes.split(",") for level in args.levels.split(",")]


def budget(group_size: int) -> int:
    """The completions 20 steps of P = 16 prompts sample at G: every arm's budget."""
    return STEPS * PROMPTS * group_size


def run(args: argparse.Namespace) -> None:
    for level, group_size in _cells(args):
        out = args.out / f"{level}-G{group_size}"
        if (out / "runs.csv").is_file():
            print(f"done already: {out}", flush=True)
            continue
        command = [str(Path(sys.executable).with_name("grpolab")), "compare", "--config",
                   str(EXPERIMENT / "compare.yaml"), "--task-options", json.dumps(LEVELS[level]),
                   "--group-sizes", str(group_size), "--budget", f"completions={budget(group_size)}",
                   "--out", str(out), "--workers", str(args.workers), "--no-report", *args.extra.split()]
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=False)


def table(args: argparse.Namespace) -> None:
    raise SystemExit("table: not written yet")


def main() -> None:
    args = _arguments()
    {"run": run, "table": table}[args.action](args)


if __name__ == "__main__":
    main()
