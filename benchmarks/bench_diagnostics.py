"""Diagnostics at scale: ``degeneracy`` and ``pass_at_k_curve`` (k = 1..G) over 10^6 groups of G = 8 (goal:
under 1 s each), and ``grpolab audit`` of a 10-million-row rollout log (quick: 1 million), whose wall time
and peak RSS are measured in a subprocess so that the RSS is the audit's own (its ``VmHWM``; not
``ru_maxrss``, which on Linux carries over the parent's RSS at fork across the exec).

The rollout log is a grpolab run directory (``rollouts/step-NNNNNN.parquet``, grpolab's own schema
including the completion text) with 1,250 prompts x G = 8 completions per step, generated in a temp
dir with per-prompt success rates drawn from a bimodal Beta(0.3, 0.3), like the embedded task's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import Row, bench_main, median, one_thread, row, timed

GROUPS, GROUP_SIZE = 1_000_000, 8
PROMPTS_PER_STEP = 1_250
AUDIT_SCRIPT = """
import json, sys, time
def hwm_kib():  # VmHWM: this process's own peak RSS (ru_maxrss would include the parent's RSS at fork)
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1])
started = time.perf_counter()
from grpolab.audit import audit
imported = time.perf_counter()
import_rss = hwm_kib()
result = audit(sys.argv[1])
done = time.perf_counter()
print(json.dumps({"audit_s": done - imported, "import_s": imported - started, "groups": result["groups"],
                  "import_rss_kib": import_rss, "peak_rss_kib": hwm_kib()}))
"""


def binary_rewards(groups: int, group_size: int, seed: int = 0) -> np.ndarray:
    """[groups, G] 0/1 rewards, per-group success rates ~ Beta(0.3, 0.3)."""
    rng = np.random.default_rng(seed)
    rates = rng.beta(0.3, 0.3, size=(groups, 1))
    return (rng.random((groups, group_size)) < rates).astype(np.float64)


def time_diagnostics(repeats: int) -> list[Row]:
    from grpolab import diagnostics

    one_thread()
    rewards = binary_rewards(GROUPS, GROUP_SIZE)  # [P, G]
    counts = rewards.sum(axis=1).astype(np.int64)  # [P]
    ks = list(range(1, GROUP_SIZE + 1))
    calls = {
        "degeneracy": lambda: diagnostics.degeneracy(rewards),
        "pass_at_k_curve": lambda: diagnostics.pass_at_k_curve(np.full(GROUPS, GROUP_SIZE), counts, ks=ks),
    }
    results = []
    for name, call in calls.items():
        seconds = median([timed(call) for _ in range(repeats)])
        results.append(row(f"diagnostics_{name}_1M_groups", value=seconds, unit="s", goal="< 1", met=seconds < 1,
                           detail=f"10^6 groups x G={GROUP_SIZE}, median of {repeats}, 1 thread"))
    return results


def write_rollout_log(run_dir: Path, steps: int, seed: int = 0) -> int:
    """A grpolab run directory with ``steps`` rollout files of PROMPTS_PER_STEP x G rows; returns the rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from grpolab.train.runlog import ROLLOUT_SCHEMA

    rng = np.random.default_rng(seed)
    out = run_dir / "rollouts"
    out.mkdir(parents=True)
    pool = pa.array([f"arith-train-{i:05d}" for i in range(5 * PROMPTS_PER_STEP)])
    answers = pa.array([str(v) for v in range(-500, 1500)])
    rows = PROMPTS_PER_STEP * GROUP_SIZE
    for step in range(1, steps + 1):
        chosen = rng.choice(len(pool), size=PROMPTS_PER_STEP, replace=False)
        rewards = binary_rewards(PROMPTS_PER_STEP, GROUP_SIZE, seed=step).reshape(-1).astype(np.float32)
        table = pa.table({
            "step": np.full(rows, step, dtype=np.int32),
            "prompt_id": pool.take(np.repeat(chosen, GROUP_SIZE)),
            "sample": np.tile(np.arange(GROUP_SIZE, dtype=np.int16), PROMPTS_PER_STEP),
            "completion": answers.take(rng.integers(0, len(answers), size=rows)),
            "reward": rewards,
            "advantage": (2 * rewards - 1).astype(np.float32),
            "length": rng.integers(2, 9, size=rows).astype(np.int32),
            "truncated": np.zeros(rows, dtype=bool),
        }, schema=ROLLOUT_SCHEMA)
        pq.write_table(table, out / f"step-{step:06d}.parquet")
    return steps * rows


def audit_in_subprocess(run_dir: Path) -> dict[str, float]:
    """Run ``grpolab.audit.audit`` in a fresh interpreter; its wall time and its own peak RSS."""
    result = subprocess.run([sys.executable, "-c", AUDIT_SCRIPT, str(run_dir)], capture_output=True, text=True,
                            check=True, timeout=1800)
    return json.loads(result.stdout.strip().splitlines()[-1])


def time_audit(rows_wanted: int) -> list[Row]:
    steps = rows_wanted // (PROMPTS_PER_STEP * GROUP_SIZE)
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-audit-") as tmp:
        rows = write_rollout_log(Path(tmp), steps)
        stats = audit_in_subprocess(Path(tmp))
    label = f"{rows / 1e6:g}M"
    detail = (f"{rows:,} rows, {stats['groups']:,} groups; import {stats['import_s']:.1f} s, "
              f"RSS after import {stats['import_rss_kib'] / 2**20:.2f} GiB")
    return [
        row(f"audit_{label}_rows_time", value=stats["audit_s"], unit="s", goal="reference", met=None, detail=detail),
        row(f"audit_{label}_rows_peak_rss", value=stats["peak_rss_kib"] / 2**20, unit="GiB", goal="reference",
            met=None, detail="VmHWM of the audit's own process (imports included)"),
    ]


def run(quick: bool) -> list[Row]:
    return time_diagnostics(repeats=3 if quick else 5) + time_audit(1_000_000 if quick else 10_000_000)


if __name__ == "__main__":
    sys.exit(bench_main(run))
