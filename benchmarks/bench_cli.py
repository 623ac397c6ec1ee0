"""How fast the command line answers before any work: ``grpolab --help``, ``grpolab train --help``,
``grpolab compare --help`` and a usage error (``grpolab train --lr abc``), each a fresh ``python -m grpolab``
process, median of 5 (``--quick``: 3). Goal: under a second each on this machine. The same interpreter starting
with nothing (``python -c pass``) is timed beside them, so that a loaded machine shows in the control row.
``tests/test_cli_startup.py`` checks that building a subcommand's parser imports no torch, transformers, pandas,
scipy or matplotlib; this benchmark says what that buys.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from _common import Row, bench_main, row

GOAL_S = 1.0
CASES = {"grpolab --help": ["--help"], "grpolab train --help": ["train", "--help"],
         "grpolab compare --help": ["compare", "--help"], "grpolab train --lr abc": ["train", "--lr", "abc"]}


def _median_seconds(argv: list[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(quick: bool) -> list[Row]:
    rounds = 3 if quick else 5
    control = _median_seconds([sys.executable, "-c", "pass"], rounds)
    rows = [row("python -c pass (control)", value=control, unit="s", goal="info", met=None)]
    for name, args in CASES.items():
        seconds = _median_seconds([sys.executable, "-m", "grpolab", *args], rounds)
        rows.append(row(name, value=seconds, unit="s", goal=f"< {GOAL_S:.0f}", met=seconds < GOAL_S,
                        detail=f"{seconds / control:.1f}x the bare interpreter"))
    return rows


if __name__ == "__main__":
    sys.exit(bench_main(run))
