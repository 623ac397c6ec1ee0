"""RL must learn: held-out reward rises on the embedded model, measured on test prompts never trained on.

Two checks, each for a group-centred estimator and for sign:
* a trivially learnable reward (the completion starts with '7'; about 10% of the start policy's samples do)
  rises to at least 0.8 on held-out prompts within 60 steps;
* on the default task ``reverse``, held-out pass@1 rises by at least 15 points within 15 steps.
A sign error, a detached loss, a wrong log-prob or an optimizer that never steps fails these tests.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from grpolab import verifiers
from grpolab.config import TrainConfig
from grpolab.tasks import get_task
from grpolab.train.trainer import Trainer

FIRST_CHAR_VERIFIER = "test_first_char_is_7"
if FIRST_CHAR_VERIFIER not in verifiers.available():

    @verifiers.register(FIRST_CHAR_VERIFIER)
    def _first_char_is_7(completion: str, reference: str) -> float:
        return float(completion.strip().startswith("7"))


def _pass1(run_dir: Path) -> tuple[float, float]:
    rows = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    start, end = rows[0], rows[-1]
    assert (start["phase"], end["phase"]) == ("start", "end")
    return start["pass_at_k"]["1"], end["pass_at_k"]["1"]


@pytest.mark.parametrize("estimator", ["dr_grpo", "sign"])
def test_trivially_learnable_reward_rises_on_held_out_prompts(estimator: str, tmp_path: Path) -> None:
    task = dataclasses.replace(get_task("reverse"), verifier=FIRST_CHAR_VERIFIER)
    config = TrainConfig(advantage=estimator, steps=60, prompts_per_step=16, group_size=4, lr=1e-3, seed=0,
                         eval_limit=64, eval_samples=4, checkpoint_every=0, progress=False, threads=1)
    Trainer(config, tmp_path / "run", task=task).run()
    start, end = _pass1(tmp_path / "run")
    assert start < 0.25, start
    assert end >= 0.8, (start, end)


@pytest.mark.parametrize("estimator", ["grpo", "sign"])
def test_held_out_pass1_rises_on_the_default_task(estimator: str, tmp_path: Path) -> None:
    config = TrainConfig(advantage=estimator, steps=15, lr=1e-3, seed=0, eval_limit=96, eval_samples=4,
                         checkpoint_every=0, progress=False, threads=1)
    Trainer(config, tmp_path / "run").run()
    start, end = _pass1(tmp_path / "run")
    assert end - start >= 0.15, (start, end)
