"""Every config field carries its classification in metadata, and the derived sets follow from it."""

from __future__ import annotations

import dataclasses

import pytest

from grpolab.config import CompareConfig, TrainConfig
from grpolab.config import fields as config_fields
from grpolab.errors import UserError
from grpolab.sweep.settings import SWEEP_OWNED
from grpolab.train.lifecycle import start_evaluation_key
from grpolab.train.settings import RESUME_MAY_CHANGE, RUNTIME_ONLY


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_every_field_is_classified(cls):
    assert config_fields.unclassified(cls) == []


def test_a_field_without_setting_is_reported():
    @dataclasses.dataclass(frozen=True)
    class Partly:
        known: int = config_fields.setting(1, scope="training")
        forgotten: int = 2

    assert config_fields.unclassified(Partly) == ["forgotten"]


def test_unknown_scope_is_refused():
    with pytest.raises(ValueError, match="scope must be one of"):
        config_fields.setting(1, scope="sometimes")


def test_derived_sets_come_from_metadata():
    assert {"progress", "threads", "workers", "backend"} <= RUNTIME_ONLY
    assert RESUME_MAY_CHANGE == {"steps"} | config_fields.runtime_only(TrainConfig)
    assert set(SWEEP_OWNED) == {"advantage", "group_size", "seed", "dynamic_sampling"}
    assert all(use for use in SWEEP_OWNED.values())


def test_lower_bounds_are_enforced_for_every_bounded_field():
    bounds = config_fields.lower_bounds(TrainConfig)
    assert bounds["group_size"] == 1 and bounds["steps"] == 0
    for name, least in bounds.items():
        with pytest.raises(UserError, match=f"{name} must be >= {least:g}"):
            TrainConfig(**{name: type(least)(least) - 1})


def test_start_evaluation_key_follows_the_start_scope():
    base = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        scope = f.metadata["scope"]
        if scope == "start":
            continue
        assert scope in ("training", "runtime"), f.name
    assert start_evaluation_key(base.replace(lr=3e-4, advantage="grpo", threads=2)) == start_evaluation_key(base)
    assert start_evaluation_key(base.replace(temperature=0.7)) != start_evaluation_key(base)
    assert start_evaluation_key(base.replace(seed=1)) != start_evaluation_key(base)
