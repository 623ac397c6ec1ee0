"""A run killed after a step and resumed, beside the same run uninterrupted: the resume tests' common set-up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grpolab.config import TrainConfig
from grpolab.train.trainer import Trainer


class _Stop(Exception):
    pass


def straight_and_resumed(config: TrainConfig, tmp_path: Path, *,
                         crash_after: int) -> tuple[Trainer, Trainer, int]:
    """``config`` trained uninterrupted in ``tmp_path/straight``, and in ``tmp_path/killed`` stopped by an exception
    after step ``crash_after`` then resumed from its last checkpoint: (straight, resumed, the step it resumed
    after), both runs finished."""
    straight = Trainer(config, tmp_path / "straight")
    straight.run()

    def crash(step: int, metrics: dict) -> None:
        if step == crash_after:
            raise _Stop

    with pytest.raises(_Stop):
        Trainer(config, tmp_path / "killed", on_step=crash).run()
    resumed = Trainer(config, tmp_path / "killed", resume=True)
    resumed_from = resumed.start_step
    resumed.run()
    return straight, resumed, resumed_from


def metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``run_dir``'s metrics.jsonl."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
