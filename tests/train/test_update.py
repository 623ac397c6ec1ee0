"""``grpolab.losses.LossOptions`` and ``grpolab.train.update.loss_options``: the policy loss's options as one value,
built from the run's ``TrainConfig``. Each option carries its config's value, and each one changes
``policy_loss``' result on a batch whose ratios reach past every bound: an option whose reading is deleted
fails here."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest
import torch

from grpolab.config import TrainConfig
from grpolab.losses import LossOptions, PolicyLossTerms, policy_loss
from grpolab.train.update import loss_options

pytestmark = pytest.mark.fast

F64 = torch.float64
# Ratios pi / pi_old below, inside and above every bound the cases set, for both signs of the advantage.
RATIOS = torch.tensor([[0.5, 1.1, 1.8], [0.5, 1.1, 1.8], [0.7, 1.3, 2.5], [0.7, 1.3, 2.5]], dtype=F64)
ADVANTAGES = torch.tensor([1.5, -1.0, 0.5, -2.0], dtype=F64)
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -1.2], [-0.9, -1.1, -2.0], [-0.6, -1.4, -0.8]], dtype=F64)
LOGPROBS = OLD + RATIOS.log()
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=F64)

# field -> (the options it is compared under, its changed value)
CASES = {
    "objective": (LossOptions(), "cispo"),
    "epsilon_low": (LossOptions(), 0.05),
    "epsilon_high": (LossOptions(), 0.5),
    "beta": (LossOptions(), 0.1),
    "importance_sampling_level": (LossOptions(), "sequence"),
    "dual_clip_c": (LossOptions(), 1.5),
    "cispo_ratio_min": (LossOptions(objective="cispo"), 0.8),
    "cispo_ratio_max": (LossOptions(objective="cispo"), 1.5),
    "sapo_temperature_pos": (LossOptions(objective="sapo"), 2.0),
    "sapo_temperature_neg": (LossOptions(objective="sapo"), 2.5),
    "vespo_k_pos": (LossOptions(objective="vespo"), 1.0),
    "vespo_lambda_pos": (LossOptions(objective="vespo"), 1.5),
    "vespo_k_neg": (LossOptions(objective="vespo"), 2.0),
    "vespo_lambda_neg": (LossOptions(objective="vespo"), 1.0),
    "off_policy_mask_threshold": (LossOptions(), 0.1),
}


def _terms(options: LossOptions) -> PolicyLossTerms:
    return policy_loss(
        LOGPROBS, OLD, ADVANTAGES, options, ref_logprobs=LOGPROBS - 0.3, mask=MASK, sampling_logprobs=LOGPROBS + 0.5
    )  # KL(sampler || policy) 0.5 per token


def test_every_option_has_a_case() -> None:
    assert sorted(CASES) == sorted(f.name for f in fields(LossOptions))


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_option_changes_the_policy_loss(name: str) -> None:
    base, value = CASES[name]
    assert getattr(base, name) != value
    before, after = _terms(base), _terms(replace(base, **{name: value}))
    changed = [
        part
        for part in ("loss", "clipped_low", "clipped_high", "clipped_dual", "off_policy_masked")
        if not torch.equal(getattr(before, part), getattr(after, part))
    ]
    assert changed, name


def _config_name(option: str) -> str:
    return "policy_loss" if option == "objective" else option


def test_loss_options_carry_the_configs_values() -> None:
    values = {name: value for name, (_, value) in CASES.items()} | {"objective": "luspo"}  # takes the dual clip
    config = TrainConfig(**{_config_name(name): value for name, value in values.items()})
    options = loss_options(config)
    for name in values:
        assert getattr(options, name) == getattr(config, _config_name(name)), name
        assert getattr(options, name) != getattr(LossOptions(), name), name  # the config's value, not a default


def test_a_default_config_keeps_its_own_cispo_bound() -> None:
    """The config's defaults are the run's: CISPO's weight is capped at the config's 5.0, where a direct call of
    ``policy_loss`` leaves it unbounded."""
    assert loss_options(TrainConfig()) == LossOptions(cispo_ratio_max=TrainConfig().cispo_ratio_max)
    assert LossOptions().cispo_ratio_max == math.inf
