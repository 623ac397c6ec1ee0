"""Every config field carries its classification in metadata, and the derived sets follow from it."""

from __future__ import annotations

import dataclasses

import pytest

from grpolab import remedies
from grpolab.config import CompareConfig, TrainConfig
from grpolab.config import fields as config_fields
from grpolab.errors import UserError
from grpolab.sweep.settings import SWEEP_OWNED
from grpolab.train.lifecycle import start_evaluation_key
from grpolab.train.settings import RESUME_MAY_CHANGE, RUNTIME_ONLY

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_every_field_is_classified(cls):
    assert config_fields.unclassified(cls) == []


def test_a_field_without_setting_is_reported():
    @dataclasses.dataclass(frozen=True)
    class Partly:
        known: int = config_fields.setting(1, scope="training", group="loss")
        forgotten: int = 2
        ungrouped: int = config_fields.setting(1, scope="training")

    assert config_fields.unclassified(Partly) == ["forgotten", "ungrouped"]


def test_unknown_scope_is_refused():
    with pytest.raises(ValueError, match="scope must be one of"):
        config_fields.setting(1, scope="sometimes")


def test_unknown_help_group_is_refused():
    with pytest.raises(ValueError, match="group must be one of model, task, sampling, loss, optimiser, evaluation, "
                                         "sweep, engine, output, got 'misc'"):
        config_fields.setting(1, scope="training", group="misc")


def test_derived_sets_come_from_metadata():
    assert {"progress", "threads", "workers", "backend"} <= RUNTIME_ONLY
    assert RESUME_MAY_CHANGE == {"steps"} | config_fields.runtime_only(TrainConfig)
    remedy_settings = {remedy.setting for remedy in remedies.REMEDIES}  # each an arm suffix of --estimators
    assert remedy_settings >= {"dynamic_sampling", "mask_degenerate_groups", "curriculum", "replay", "variance_filter"}
    assert set(SWEEP_OWNED) == {"advantage", "group_size", "seed"} | remedy_settings
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


# Text settings that take any text as far as the schema goes, each with why no fixed set of values fits. A new
# text field with a fixed set of values must get setting(..., choices=(...)) (or check= for a pattern), not a line here.
FREE_TEXT = {
    TrainConfig: {
        "model": "a registry name, a local model or run directory, or a hub id",
        "task": "a registered task or the dotted path of the user's own builder",
        "data": "a file, a folder or a datasets hub id",
        "prompt_column": "a column of the user's table",
        "reference_column": "a column of the user's table",
        "verifier": "a registry name or the dotted path of the user's own function (resolved by the registry)",
        "advantage": "a name of the estimator registry, which grows (checked there: grpolab estimators)",
        "lora_targets": "comma-separated module names of the model",
        "grad_analysis_params": "trainable, all, lora, or any comma-separated parameter-name substrings",
        "report_to": "a comma-separated list of backends, checked together with tensorboard by report_backends",
    },
    CompareConfig: {
        "estimators": "comma-separated estimator names, each optionally with remedy suffixes (+dynamic, +mask, ...)",
        "group_sizes": "comma-separated integers (checked by group_size_list)",
        "lrs": "comma-separated numbers (checked by lr_list)",
        "vary": "FIELD=V1,V2;... over any training setting",
        "primary": "two of the estimators (checked by primary_pair)",
    },
}


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_every_text_field_has_choices_or_is_justified_free_text(cls):
    assert config_fields.open_text(cls) == list(FREE_TEXT[cls]), (
        "a text field without choices: give it setting(..., choices=(...)) (check= for a pattern), or add it "
        "with its reason to FREE_TEXT; a FREE_TEXT entry that has choices now goes")


def test_a_text_field_without_choices_is_found():
    @dataclasses.dataclass(frozen=True)
    class Later:
        mode: str = config_fields.setting("fast", scope="training")
        level: str | None = config_fields.setting(None, scope="training")
        kind: str = config_fields.setting("a", scope="training", choices=("a", "b"))
        size: int = config_fields.setting(1, scope="training")

    assert config_fields.open_text(Later) == ["mode", "level"]
    assert config_fields.choices(Later) == {"kind": ("a", "b")}


def test_a_default_outside_its_choices_or_bad_choices_are_programming_errors():
    with pytest.raises(ValueError, match="the default 'c' is not one of the choices a, b"):
        config_fields.setting("c", scope="training", choices=("a", "b"))
    with pytest.raises(ValueError, match="choices must be a non-empty tuple of names"):
        config_fields.setting("a", scope="training", choices=["a", "b"])


def _one_of(names):
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_every_choice_is_accepted_and_any_other_value_refused_in_one_line(cls):
    found = config_fields.choices(cls)
    assert found, "the schema has fields with choices"
    for name, allowed in found.items():
        for value in allowed:
            assert getattr(cls(**{name: value}), name) == value
        for bad in ("nope", allowed[0].upper(), None):
            with pytest.raises(UserError) as error:
                cls(**{name: bad})
            assert str(error.value) == f"{name} must be {_one_of(allowed)}, got {bad!r}"


def test_the_known_choices_and_their_order():
    """What the CLI's usage and the messages list, in the documented order (the docstrings name the same)."""
    found = config_fields.choices(TrainConfig)
    assert found["lr_schedule"] == ("constant", "linear", "cosine")
    assert found["engine"] == ("grpolab", "trl") and found["eval_split"] == ("test", "validation")
    assert set(found) == {"reward_granularity", "lr_schedule", "loss_aggregation", "dtype", "sampler_dtype",
                          "eval_split", "importance_sampling_level", "policy_loss", "engine", "vllm_mode",
                          "grad_analysis_parts"}
    assert found["grad_analysis_parts"] == ("all", "half_batch")
    assert config_fields.choices(CompareConfig) == {"backend": ("local", "ray")}


def test_the_loss_choices_are_the_losses_the_update_implements():
    from grpolab.losses import AGGREGATION_MODES, IMPORTANCE_SAMPLING_LEVELS, POLICY_OBJECTIVES

    found = config_fields.choices(TrainConfig)
    assert found["loss_aggregation"] == AGGREGATION_MODES
    assert found["policy_loss"] == POLICY_OBJECTIVES
    assert found["importance_sampling_level"] == IMPORTANCE_SAMPLING_LEVELS


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_each_fields_docstring_names_its_choices(cls):
    """The help of a flag (and the docs generated from it) never lists other values than the schema."""
    from grpolab.commands.flags import field_docs

    docs = field_docs(cls)
    for name, allowed in config_fields.choices(cls).items():
        missing = [value for value in allowed if value not in docs[name]]
        assert missing == [], f"{name}'s docstring does not name {missing}"


def test_device_values_follow_a_pattern_checked_from_the_metadata():
    from grpolab.config.budget import check_budget
    from grpolab.config.checks import check_seed, check_variance_share
    from grpolab.devices import check_name

    assert config_fields.value_checks(TrainConfig) == {"device": check_name, "seed": check_seed,
                                                        "budget": check_budget,
                                                        "variance_filter_p": check_variance_share}
    with pytest.raises(UserError, match=r"^budget must be completions=N, tokens=N or trained_tokens=N with N >= 1, "
                                        r"got 'steps=3'"):
        TrainConfig(budget="steps=3")
    assert TrainConfig(budget="tokens=5").budget == "tokens=5"
    for name in ("auto", "cpu", "cuda", "cuda:1"):
        assert TrainConfig(device=name).device == name
    with pytest.raises(UserError, match=r"^device must be auto, cpu, cuda or cuda:N, got 'gpu'$"):
        TrainConfig(device="gpu")
