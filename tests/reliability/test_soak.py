"""Soak test: 1,000 steps of the embedded default; peak memory must stop growing after warm-up.

Marked ``slow`` (not in the default run): ``pytest -m slow tests/reliability/test_soak.py``.
"""

from __future__ import annotations

import json
import math
import os

import psutil
import pytest

from grpolab.config import TrainConfig
from grpolab.train.trainer import Trainer

STEPS = 1_000
SAMPLE_EVERY = 10
WARM_UP = 100
TOLERANCE = 0.05  # peak RSS of the last 500 steps may exceed that of steps 100-500 by at most 5 %


@pytest.mark.slow
@pytest.mark.timeout(3_600)
def test_thousand_steps_memory_is_flat(tmp_path) -> None:
    process = psutil.Process()
    samples: dict[int, int] = {}

    def on_step(step: int, metrics: dict) -> None:
        if step % SAMPLE_EVERY == 0:
            samples[step] = process.memory_info().rss
        assert math.isfinite(metrics["loss/total"]), f"step {step}: loss {metrics['loss/total']}"

    config = TrainConfig(steps=STEPS, progress=False, threads=int(os.environ.get("SOAK_THREADS", "1")))
    Trainer(config, tmp_path / "run", on_step=on_step).run()

    middle = max(rss for step, rss in samples.items() if WARM_UP <= step <= STEPS // 2)
    last = max(rss for step, rss in samples.items() if step > STEPS // 2)
    report = {"rss_mib": {str(s): round(r / 2**20, 1) for s, r in sorted(samples.items())},
              "peak_100_500_mib": round(middle / 2**20, 1), "peak_501_1000_mib": round(last / 2**20, 1)}
    (tmp_path / "rss.json").write_text(json.dumps(report))
    print(json.dumps({k: v for k, v in report.items() if k != "rss_mib"}))
    assert last <= middle * (1 + TOLERANCE), report
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))
