"""The update under bfloat16 autocast (``TrainConfig.dtype``) against float32 on the same batch.

With an on-policy iteration and beta = 0 the logged policy loss does not depend on the log-probs (the
ratio is exactly 1), so the comparison adds a KL term (beta = 0.1) to a reference that differs from the
policy (its weights perturbed by N(0, 0.02^2) noise): the loss then depends on the forward pass, and
both runs take their gradient at the same weights. Measured on the embedded model (P = 4, G = 4,
T <= 16): loss/total 0.3%, loss/kl 1.4%, loss/grad_norm 4.4% relative apart. Tolerances stated here:
loss/total and loss/kl within 3%, loss/grad_norm within 10% relative.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tests.train.sampled_batch import MIXED_REWARDS, sampled_arith_batch

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.train.batch import StepBatch
from grpolab.train.update import build_optimizer, update_policy

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def setup():
    return sampled_arith_batch(MIXED_REWARDS, max_new_tokens=16)


def _update(policy, batch: StepBatch, dtype: str) -> dict:
    torch.manual_seed(0)
    model = copy.deepcopy(policy.model).train()
    reference = copy.deepcopy(policy.model).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(1)) * 0.02)
    config = TrainConfig(dtype=dtype, beta=0.1, lr=1e-4, micro_batch_size=8)
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    advantages = compute_advantages("grpo", batch.rewards)
    return update_policy(model, build_optimizer(params, config), batch, advantages, config,
                         lr=config.lr,
                         max_length=16, reference=reference)


def test_bfloat16_autocast_logs_the_float32_loss_within_tolerance(setup) -> None:
    policy, batch = setup
    full, half = _update(policy, batch, "float32"), _update(policy, batch, "bfloat16")
    assert full["loss/kl"] > 0 and full["loss/trained_sequences"] == 16
    for key, tolerance in (("loss/total", 0.03), ("loss/kl", 0.03), ("loss/grad_norm", 0.1)):
        assert half[key] == pytest.approx(full[key], rel=tolerance), (key, half[key], full[key])
    assert half["loss/total"] != full["loss/total"]  # autocast really ran in bfloat16
