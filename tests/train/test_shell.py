"""The run shell both engines share (``grpolab.train.shell``): one step's prompts, figures and rollout table, the
fresh-directory and resume checks, and both engines going through it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.train.lifecycle import load_task_for
from grpolab.train.shell import RunShell, rollout_figures, rollout_table, step_problems, step_seed

pytestmark = pytest.mark.fast

TINY = dict(steps=2, prompts_per_step=3, group_size=2, eval_limit=4, eval_samples=1, progress=False, threads=1,
            eval_start=False, seed=11)


def test_the_own_engine_trains_on_the_prompts_the_shell_draws(tmp_path: Path) -> None:
    """The TRL engine's dataset is built from ``step_problems`` (``tests/integrations/test_trl_engine.py``); the own
    engine's rollout tables must hold the same prompts, step by step."""
    from grpolab.train import train

    config = TrainConfig(**TINY)
    train(config, tmp_path / "run")
    task = load_task_for(config)
    for step in (1, 2):
        table = pd.read_parquet(tmp_path / "run" / "rollouts" / f"step-{step:06d}.parquet")
        drawn = [p.id for p in step_problems(task, config, step)]
        assert list(table["prompt_id"]) == [i for i in drawn for _ in range(config.group_size)]
        assert list(table.columns) == list(rollout_table(0, [], [], [], [], [], [], group_size=2))


def test_step_prompts_depend_on_seed_step_and_round_only() -> None:
    config = TrainConfig(task="reverse", prompts_per_step=5, seed=7)
    task = load_task_for(config)
    ids = {(step, round_): [p.id for p in step_problems(task, config, step, round_)]
           for step in (1, 2) for round_ in (0, 1)}
    assert all(len(set(drawn)) == 5 for drawn in ids.values())  # without replacement
    assert len({tuple(drawn) for drawn in ids.values()}) == 4  # each (step, round) its own draw
    assert ids[(1, 0)] == [p.id for p in step_problems(task, config, 1)]  # the same draw when asked again
    assert step_seed(7, 1, 0) != step_seed(7, 1, 1) != step_seed(8, 1, 1)


def test_rollout_figures_by_hand() -> None:
    rewards = np.array([[1.0, 0.0], [np.nan, 1.0]])
    lengths = np.array([[3, 4], [5, 8]])
    figures = rollout_figures(rewards, lengths, [False, True, False, False], completions_generated=12)
    assert figures == {"rollout/reward_mean": 2 / 3, "rollout/accuracy": 2 / 3, "rollout/completion_length": 5.0,
                       "rollout/truncated": 0.25, "rollout/groups": 2.0, "rollout/completions_generated": 12.0,
                       "rollout/unscorable": 1.0}


def test_the_rollout_table_is_problem_major_with_one_row_per_completion() -> None:
    table = rollout_table(3, ["a", "a", "b", "b"], ["w", "x", "y", "z"], [1, 0, 0, 0], [0.5, -0.5, 0, 0], [1, 2, 3, 4],
                          [False, True, False, False], group_size=2)
    assert table["sample"] == [0, 1, 0, 1] and table["step"] == [3] * 4
    assert table["reward"] == [1.0, 0.0, 0.0, 0.0] and all(isinstance(r, float) for r in table["reward"])
    assert table["truncated"] == [False, True, False, False]


def _trl_checkpoint(run_dir: Path) -> None:
    checkpoint = run_dir / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))


def test_a_fresh_run_refuses_an_engines_checkpoint_and_overwrite_removes_it(tmp_path: Path) -> None:
    _trl_checkpoint(tmp_path)
    shell = RunShell(TrainConfig(), tmp_path, command="test")
    try:
        with pytest.raises(UserError, match="already holds a run; pass --resume"):
            shell.check_fresh(resume=False, overwrite=False, has_checkpoint=True)
        assert (tmp_path / "checkpoints").is_dir()
        shell.check_fresh(resume=True, overwrite=False, has_checkpoint=True)  # a resume is not fresh
        shell.check_fresh(resume=False, overwrite=True, has_checkpoint=True)
        assert not (tmp_path / "checkpoints").exists()
    finally:
        shell.release()


def test_a_resume_with_checkpoints_and_no_saved_settings_is_refused_under_either_engine(tmp_path: Path) -> None:
    """Deleting ``config.yaml`` must not let ``--resume`` train under the flags' defaults."""
    from grpolab.train import train

    _trl_checkpoint(tmp_path / "run")
    with pytest.raises(UserError, match=r"has checkpoints but no config\.yaml"):
        train(TrainConfig(engine="trl", **TINY), tmp_path / "run", resume=True)
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_a_second_shell_on_a_locked_directory_is_refused(tmp_path: Path) -> None:
    first = RunShell(TrainConfig(), tmp_path, command="first")
    try:
        with pytest.raises(UserError, match="in use by another grpolab process"):
            RunShell(TrainConfig(), tmp_path, command="second")
        reader = RunShell(TrainConfig(), tmp_path, command="reader", writer=False)  # takes no lock, writes nothing
        reader.open_logs(resume=False, saved=None, start_step=0)
        assert not (tmp_path / "config.yaml").exists()
    finally:
        first.release()


def test_evaluations_are_due_every_eval_every_steps_before_the_end() -> None:
    shell = RunShell(TrainConfig(steps=6, eval_every=2), Path("."), command="test", writer=False)
    assert [s for s in range(1, 7) if shell.evaluation_due(s)] == [2, 4]
    assert not RunShell(TrainConfig(steps=6, eval_every=0), Path("."), command="t", writer=False).evaluation_due(2)


@pytest.mark.parametrize(("changes", "message"), [
    ({"advantage": "gpro"}, "unknown advantage estimator 'gpro'"),
    ({"advantage": "grpo", "group_size": 1}, "needs groups of G >= 2"),
    ({"advantage": "pkpo", "advantage_kwargs": {"k": 9}}, "fix --advantage-kwargs"),
])
def test_a_refused_estimator_leaves_no_run_directory(changes: dict, message: str, tmp_path: Path) -> None:
    """A typo in the estimator or its settings fails before the run directory is made (was: an empty directory)."""
    from grpolab.train.trainer import Trainer

    with pytest.raises(ValueError, match=message):
        Trainer(TrainConfig(**{**TINY, **changes}), tmp_path / "run")
    assert not (tmp_path / "run").exists()
