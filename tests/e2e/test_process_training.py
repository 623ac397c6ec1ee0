"""Per-token (process) rewards end to end: a short training run, `grpolab gradients`, and the flag's help."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from grpolab.advantages import token_estimators
from grpolab.cli import main
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.train.trainer import Trainer

TINY = dict(prompts_per_step=4, group_size=4, steps=2, eval_limit=8, eval_samples=2, checkpoint_every=0,
            progress=False, threads=1, lr=1e-3, reward_granularity="token")


@pytest.mark.parametrize("estimator", ["grpo", "sign"])
def test_two_steps_with_per_token_rewards(estimator: str, tmp_path) -> None:
    trainer = Trainer(TrainConfig(advantage=estimator, **TINY), tmp_path / "run")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert all(np.isfinite(row["loss/total"]) and row["loss/trained_sequences"] > 0 for row in rows)
    assert any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
    table = pq.read_table(tmp_path / "run" / "rollouts" / "step-000001.parquet")
    assert table.num_rows == 16 and np.isfinite(table.column("advantage").to_numpy()).all()


@pytest.mark.parametrize(("changes", "message"), [
    ({"advantage": "rloo"}, ", ".join(token_estimators())),
    ({"dynamic_sampling": True}, "dynamic_sampling"),
    ({"reward_granularity": "step"}, "outcome or token"),
])
def test_per_token_settings_that_cannot_run_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        TrainConfig(**{**TINY, **changes})


def test_a_verifier_without_a_process_version_is_refused_before_training(tmp_path) -> None:
    with pytest.raises(UserError, match="process version"):
        Trainer(TrainConfig(verifier="math", **TINY), tmp_path / "run")


def test_gradients_command_measures_per_token_rewards(capsys) -> None:
    argv = ["gradients", "--advantage", "grpo", "--prompts", "4", "--threads", "1", "--json"]
    assert main([*argv, "--reward-granularity", "token"]) == 0
    token = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert token["reward_granularity"] == "token" and outcome["reward_granularity"] == "outcome"
    assert token["metrics"]["grad/token_advantage_within_completion_std"] > 0
    assert outcome["metrics"]["grad/token_advantage_within_completion_std"] == 0
    assert token["metrics"]["grad/row_sum_error"] < 1e-4
    assert main([*argv[:-1], "--advantage", "rloo", "--reward-granularity", "token"]) == 2


@pytest.mark.parametrize("command", ["train", "gradients"])
def test_help_documents_the_per_token_option(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--reward-granularity" in text and "per-token process rewards" in text
