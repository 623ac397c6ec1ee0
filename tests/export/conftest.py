"""Runs trained once for the export tests: the embedded model with LoRA and with every weight trained, two steps,
a checkpoint after each. Tests that damage a run copy it first (``copy_run``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grpolab.config import TrainConfig
from grpolab.train.trainer import Trainer

TINY = dict(advantage="sign", prompts_per_step=4, group_size=4, steps=2, eval_limit=8, eval_samples=2,
            checkpoint_every=1, keep_checkpoints=2, progress=False, threads=1, lr=3e-3)


@pytest.fixture(scope="session")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished LoRA run of the embedded model (checkpoints of steps 1 and 2)."""
    run_dir = tmp_path_factory.mktemp("lora") / "lora-run"
    Trainer(TrainConfig(lora=True, lora_r=4, lora_alpha=8, **TINY), run_dir).run()
    return run_dir


@pytest.fixture(scope="session")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the embedded model with every weight trained (checkpoints of steps 1 and 2)."""
    run_dir = tmp_path_factory.mktemp("full") / "full-run"
    Trainer(TrainConfig(**TINY), run_dir).run()
    return run_dir


def copy_run(run_dir: Path, where: Path) -> Path:
    """A copy of ``run_dir`` under ``where``, with the same folder name, to damage."""
    return Path(shutil.copytree(run_dir, where / run_dir.name))
