"""The main job: ``grpolab compare`` with its defaults (6 estimators x 5 seeds x 50 steps on the embedded
model, evaluations and the report), run as a subprocess with ``--out`` in a temp dir. Reports the total
wall time (goal: under 15 minutes on 2 cores) and the peak memory: the peak of the summed RSS of the
process tree and the largest single-process RSS in it, both sampled every 0.2 s (``ru_maxrss`` of
the children is not used: on Linux it carries over the parent's RSS at fork across the exec).

Quick mode runs ``--seeds 1 --estimators sign,dr_grpo --steps 5`` (2 runs instead of 30, 5 steps
instead of 50): informational, no goal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import PeakSampler, Row, bench_main, default_model, largest_rss_bytes, mib, row, tree_rss_bytes

GOAL_SECONDS = 15 * 60
QUICK_ARGS = ["--seeds", "1", "--estimators", "sign,dr_grpo", "--steps", "5"]


def compare_command(out: Path, quick: bool) -> list[str]:
    command = [str(Path(sys.executable).parent / "grpolab"), "compare", "--out", str(out)]
    model, is_embedded = default_model()
    if not is_embedded:
        command += ["--model", model]
    return command + (QUICK_ARGS if quick else [])


def run_measured(command: list[str], log: Path) -> dict[str, Any]:
    """Run ``command``; wall seconds, peak summed tree RSS, largest single-process RSS, exit code."""
    started = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                   env={**os.environ, "COLUMNS": "120"})
        with PeakSampler(lambda: tree_rss_bytes(process.pid), interval=0.2) as tree, \
                PeakSampler(lambda: largest_rss_bytes(process.pid), interval=0.2) as largest:
            process.wait()
    return {"seconds": time.perf_counter() - started, "tree_peak": tree.peak, "max_process_rss": largest.peak,
            "returncode": process.returncode}


def run(quick: bool) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-compare-") as tmp:
        out, log = Path(tmp) / "out", Path(tmp) / "compare.log"
        command = compare_command(out, quick)
        stats = run_measured(command, log)
        if stats["returncode"] != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({stats['returncode']}):\n{log.read_text()[-3000:]}")
        runs = sum(1 for path in (out / "runs").iterdir() if (path / "summary.json").is_file())
    variant = "quick variant (2 runs x 5 steps)" if quick else "defaults (6 estimators x 5 seeds x 50 steps)"
    name = "compare_quick" if quick else "compare_default"
    shown = " ".join(["grpolab compare", *command[4:]])
    memory = (f"tree peak {mib(stats['tree_peak']):.0f} MiB (sum of RSS), largest process "
              f"{mib(stats['max_process_rss']):.0f} MiB")
    return [
        row(f"{name}_wall_time", value=stats["seconds"], unit="s", goal="informational" if quick else "< 900",
            met=None if quick else stats["seconds"] < GOAL_SECONDS, detail=f"{variant}; {runs} runs; `{shown}`",
            runs=runs),
        row(f"{name}_peak_memory", value=mib(stats["tree_peak"]), unit="MiB", goal="reference", met=None,
            detail=memory, max_process_rss_mib=round(mib(stats["max_process_rss"]))),
    ]


if __name__ == "__main__":
    sys.exit(bench_main(run))
