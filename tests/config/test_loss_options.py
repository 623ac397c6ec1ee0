"""The loss options of ``TrainConfig`` (docs/losses.md): defaults that keep the clipped token-level loss, one-line
refusals of bad values and meaningless combinations, and ``grpolab train --help`` naming each option's paper."""

from __future__ import annotations

import argparse

import pytest

from grpolab.commands import train
from grpolab.config import TrainConfig, build_config
from grpolab.errors import UserError

pytestmark = pytest.mark.fast


def test_defaults_are_todays_loss() -> None:
    config = TrainConfig()
    assert (config.importance_sampling_level, config.policy_loss) == ("token", "clip")
    assert config.dual_clip_c is None and config.sampler_is_cap is None and config.overlong_buffer is None
    assert config.mask_truncated_completions is False


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"importance_sampling_level": "seq"}, "importance_sampling_level must be token or sequence, got 'seq'"),
        ({"policy_loss": "ppo"}, "policy_loss must be clip, cispo, sapo, luspo or vespo, got 'ppo'"),
        ({"dual_clip_c": 3.0, "policy_loss": "sapo"}, "sapo has none: drop --dual-clip-c"),
        ({"policy_loss": "vespo", "importance_sampling_level": "sequence"},
         "drop --importance-sampling-level sequence"),
        ({"sapo_temperature_neg": 0.0}, "sapo_temperature_pos and sapo_temperature_neg must be > 0"),
        ({"top_entropy_quantile": 1.5}, "top_entropy_quantile must be in [0, 1]"),
        ({"entropy_coef": -0.1}, "entropy_coef must be >= 0"),
        ({"entropy_target": 0.3}, "entropy_target is not supported by engine grpolab"),
        ({"top_entropy_quantile": 0.2}, "top_entropy_quantile is not supported by engine grpolab"),
        ({"dual_clip_c": 1.0}, "dual_clip_c must be > 1"),
        ({"dual_clip_c": 3.0, "policy_loss": "cispo"}, "drop --dual-clip-c or use --policy-loss clip"),
        ({"policy_loss": "cispo", "cispo_ratio_max": 0.9}, "need cispo_ratio_min < 1 < cispo_ratio_max"),
        ({"policy_loss": "cispo", "cispo_ratio_min": 1.2}, "need cispo_ratio_min < 1 < cispo_ratio_max"),
        ({"cispo_ratio_min": -0.5}, "cispo_ratio_min must be >= 0"),
        ({"sampler_is_cap": 0.0}, "sampler_is_cap must be > 0"),
        ({"overlong_buffer": 0, "advantage": "grpo"}, "overlong_buffer must be >= 1"),
        ({"overlong_penalty": -1.0}, "overlong_penalty must be >= 0"),
        ({"overlong_buffer": 4}, "advantage 'sign' is defined only for binary rewards; pick an estimator such as"),
        ({"overlong_buffer": 4, "advantage": "passk"}, "advantage 'passk' is defined only for binary rewards"),
        ({"overlong_buffer": 4, "advantage": "grpo", "reward_granularity": "token"},
         "use it with reward_granularity outcome"),
    ],
)
def test_bad_loss_options_are_refused_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(UserError) as error:
        TrainConfig(**changes)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("changes", [
    {"importance_sampling_level": "sequence", "policy_loss": "cispo", "cispo_ratio_min": 0.5},
    {"dual_clip_c": 3.0, "mask_truncated_completions": True, "sampler_is_cap": 2.0},
    {"overlong_buffer": 4, "overlong_penalty": 0.5, "advantage": "batch_std"},
])
def test_accepted_combinations_keep_their_values_and_reload_from_the_saved_config(changes: dict) -> None:
    config = TrainConfig(**changes)
    assert {name: getattr(config, name) for name in changes} == changes  # accepted as given, nothing reset
    assert build_config(config.to_dict()) == config  # the saved config.yaml of such a run loads (and resumes)


PAPERS = {
    "importance_sampling_level": "2507.18071",  # GSPO
    "policy_loss": "2506.13585",  # CISPO (MiniMax-M1)
    "cispo_ratio_max": "2506.13585",
    "dual_clip_c": "1912.09729",  # Ye et al. 2020
    "mask_truncated_completions": "2503.14476",  # DAPO
    "overlong_buffer": "2503.14476",
    "overlong_penalty": "2503.14476",
    "sampler_is_cap": "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training",  # TIS, a blog post
    "sapo_temperature_pos": "2511.20347",  # SAPO
    "sapo_temperature_neg": "2511.20347",
    "vespo_k_pos": "2602.10693",  # VESPO
    "vespo_lambda_neg": "2602.10693",
    "entropy_coef": "1707.06347",  # PPO's entropy bonus
    "entropy_target": "2505.22312",  # Skywork-OR1's adaptive entropy control
    "top_entropy_quantile": "2506.01939",  # Beyond the 80/20 Rule
    "off_policy_mask_threshold": "2512.02556",  # DeepSeek-V3.2
}


@pytest.mark.parametrize(("objective", "paper"), [("sapo", "2511.20347"), ("luspo", "2602.05261"),
                                                  ("vespo", "2602.10693")])
def test_policy_loss_help_names_the_trl_losses_papers(objective: str, paper: str) -> None:
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    text = " ".join(next(a for a in parser._actions if a.dest == "policy_loss").help.split())
    assert objective in text and paper in text


@pytest.mark.parametrize(("name", "paper"), PAPERS.items())
def test_train_help_names_each_options_paper(name: str, paper: str) -> None:
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    action = next(a for a in parser._actions if a.dest == name)
    assert paper in " ".join(action.help.split())
    assert paper in " ".join(parser.format_help().split())


DOC_PAGES = ("losses.md", "estimators.md", "remedies.md")


def test_every_setting_of_the_loss_group_is_documented() -> None:
    """Each field whose help group is ``loss`` (the schema, not a list here) is named, as a setting or a flag, in
    docs/losses.md, docs/estimators.md or docs/remedies.md: a new loss option without its page fails."""
    import dataclasses
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    text = " ".join((docs / page).read_text(encoding="utf-8") for page in DOC_PAGES)
    loss = [f.name for f in dataclasses.fields(TrainConfig) if f.metadata["group"] == "loss"]
    assert {"policy_loss", "dual_clip_c", "entropy_coef"} <= set(loss)  # the group is the loss options
    assert [name for name in loss if name not in text and "--" + name.replace("_", "-") not in text] == []
