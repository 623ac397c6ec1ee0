"""``grpolab.train.step.UpdateSettings``: the update takes the settings it reads and nothing else of the run's
config. A field the update stops reading, or a function of the update that takes the whole ``TrainConfig`` again,
fails here."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from grpolab.config import TrainConfig
from grpolab.train import step
from grpolab.train.step import UpdateSettings

pytestmark = pytest.mark.fast


def test_every_update_setting_is_read_by_the_update() -> None:
    source = inspect.getsource(step)
    unread = [f.name for f in fields(UpdateSettings) if f"settings.{f.name}" not in source]
    assert unread == []


def test_only_the_advantages_and_the_optimizer_take_the_whole_config() -> None:
    functions = [fn for fn in vars(step).values() if inspect.isfunction(fn) and fn.__module__ == step.__name__]
    takes_config = sorted(fn.__name__ for fn in functions
                          if any("TrainConfig" in str(p.annotation) for p in inspect.signature(fn).parameters.values()))
    # the advantages (with the statistics their estimator needs) and the optimizer; nothing of the update itself
    assert takes_config == ["_outcome_rewards", "build_optimizer", "estimator_statistics", "step_advantages"]


def test_settings_carry_the_configs_values() -> None:
    config = TrainConfig(beta=0.04, epsilon_high=0.28, micro_batch_size=3, policy_loss="cispo",
                         importance_sampling_level="sequence", sampler_is_cap=2.0, entropy_coef=0.01)
    settings = UpdateSettings.of(config)
    assert {f.name: getattr(settings, f.name) for f in fields(UpdateSettings)} == {
        f.name: getattr(config, f.name) for f in fields(UpdateSettings)}
    assert (settings.beta, settings.epsilon_high, settings.micro_batch_size) == (0.04, 0.28, 3)
