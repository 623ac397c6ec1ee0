"""The config schema (grpolab.config): derived sizes, value checks naming the setting, config files, and the
split of one file between the sweep and its runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from grpolab.config import CompareConfig, TrainConfig, build_config, load_config_file, split_file_values
from grpolab.errors import UserError

pytestmark = pytest.mark.fast


def test_derived_sizes_are_properties_of_the_fields() -> None:
    config = TrainConfig(group_size=8, prompts_per_step=3, epsilon_low=0.2)
    assert config.completions_per_step == 24 and config.clip_high == 0.2
    assert config.replace(epsilon_high=0.28).clip_high == 0.28
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.group_size = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"group_size": 0}, "group_size must be >= 1, got 0"),
        ({"eval_limit": 0}, "set eval_limit: null in a --config file"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"lr": float("inf")}, "lr must be a finite number"),
        ({"top_p": 1.5}, "top_p must be in (0, 1] (the nucleus' share of probability), got 1.5"),
        ({"temperature": 0.0}, "temperature must be > 0, got 0.0"),  # was: "got 1.0, 0.0", which value unsaid
        ({"adam_betas": (1.0, 0.99)}, "adam_betas must be two numbers in [0, 1)"),
        ({"loss_aggregation": "sum"}, "loss_aggregation must be token_mean, seq_mean_token_mean, "
                                      "seq_mean_token_sum_norm or seq_mean_token_sum, got 'sum'"),
        ({"lr_schedule": "step"}, "lr_schedule must be constant, linear or cosine"),
        ({"task_options": {"max_new_tokens": "8"}}, "task_options max_new_tokens must be an integer"),
        ({"task_options": {"use_chat_template": "yes"}}, "use_chat_template must be true or false"),
        ({"task_options": [1]}, "task_options must be a mapping of names to values such as {"),
        ({"task_options": None}, "task_options must be a mapping"),
        ({"advantage_kwargs": [1]}, "advantage_kwargs must be a mapping of names to values such as {\"k\": 2}"),
        ({"task_options": {1: 2}}, "task_options keys must be names (text), got 1 (int)"),
        ({"advantage_kwargs": {1: 2}}, "advantage_kwargs keys must be names (text), got 1 (int)"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(changes: dict, message: str) -> None:
    with pytest.raises(UserError) as error:
        TrainConfig(**changes)
    assert message in str(error.value)
    with pytest.raises(UserError):  # the same check on a changed copy
        TrainConfig().replace(**changes)


def test_build_config_names_unknown_settings_and_wrong_types() -> None:
    with pytest.raises(UserError, match=r"unknown setting\(s\) group, stepz; known settings: adam_betas"):
        build_config({"stepz": 3, "group": 2})
    with pytest.raises(UserError, match=r"setting steps must be of type int, got '3' \(str\)"):
        build_config({"steps": "3"})
    with pytest.raises(UserError, match="setting lora must be of type bool"):
        build_config({"lora": 1})


def test_build_config_stores_what_runs() -> None:
    config = build_config({"lr": 1, "adam_betas": [0.8, 0.9], "eval_limit": None})
    assert type(config.lr) is float and config.adam_betas == (0.8, 0.9) and config.eval_limit is None
    assert build_config(config.to_dict()) == config  # to_dict is what a config file holds


def test_split_file_values_between_the_sweep_and_its_runs() -> None:
    sweep, train = split_file_values({"seeds": 2, "steps": 9, "lr": 3e-4}, CompareConfig, TrainConfig)
    assert sweep == {"seeds": 2} and train == {"steps": 9, "lr": 3e-4}
    with pytest.raises(UserError, match=r"unknown setting\(s\) seed_count in the config file"):
        split_file_values({"seed_count": 2}, CompareConfig, TrainConfig)


def test_compare_config_lists_and_checks() -> None:
    sweep = CompareConfig(estimators=" sign, dr_grpo+dynamic ,", seeds=3, group_sizes="2,8", lrs="3e-4,1e-4")
    assert sweep.estimator_list == ["sign", "dr_grpo+dynamic"] and sweep.seed_list == [0, 1, 2]
    assert sweep.group_size_list == [2, 8] and sweep.lr_list == [1e-4, 3e-4]
    assert not set(sweep.selection_seed_list) & set(range(1000))  # never a reported seed
    assert CompareConfig(lrs="").lr_list == []
    for changes, message in (({"seeds": 0}, "seeds must be >= 1"), ({"estimators": " , "}, "estimators is empty"),
                             ({"group_sizes": "2,x"}, "comma-separated integers"), ({"lrs": "1e-4,-1"}, "positive"),
                             ({"backend": "slurm"}, "backend must be local or ray"),
                             ({"workers": 0}, "workers must be >= 1"),
                             ({"lrs": "3e-4,1e-4,0.0003"}, "lrs names 0.0003 twice"),
                             ({"group_sizes": "2,4,2"}, "group_sizes names 2 twice"),
                             ({"estimators": "sign,grpo,sign"}, "estimators names sign twice")):
        with pytest.raises(UserError, match=message):
            CompareConfig(**changes)


def test_config_files_yaml_and_toml_and_their_errors(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("lr: 1e-5\nsteps: 3\n")  # YAML 1.1 would read 1e-5 as a string
    (tmp_path / "a.toml").write_text("lr = 1e-5\nsteps = 3\n")
    assert load_config_file(tmp_path / "a.yaml") == load_config_file(tmp_path / "a.toml") == {"lr": 1e-5, "steps": 3}
    (tmp_path / "marked.toml").write_text("lr = 1e-5\nsteps = 3\n", encoding="utf-8-sig")  # a byte-order mark
    assert load_config_file(tmp_path / "marked.toml") == {"lr": 1e-5, "steps": 3}
    (tmp_path / "empty.yaml").write_text("")
    assert load_config_file(tmp_path / "empty.yaml") == {}
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "bad.toml").write_text("lr = \n")
    (tmp_path / "latin1.yaml").write_bytes("model: caf\xe9\n".encode("latin-1"))
    for name, message in (("missing.yaml", "does not exist"), ("list.yaml", "must hold a mapping"),
                          ("bad.toml", "is not valid TOML"), ("latin1.yaml", "is not UTF-8 text")):
        with pytest.raises(UserError, match=message):
            load_config_file(tmp_path / name)
