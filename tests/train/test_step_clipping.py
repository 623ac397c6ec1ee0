"""``update_policy`` logs the pre-clip gradient norm (``loss/grad_norm``) and whether clipping acted on the
step (``loss/clipped``, 0 or 1), so that the compare report can say how often each estimator was clipped."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from tests.train.sampled_batch import sampled_arith_batch

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.train.batch import StepBatch
from grpolab.train.update import build_optimizer, update_policy

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def setup():
    return sampled_arith_batch(np.array([[1, 0], [0, 1]], dtype=np.float64), max_new_tokens=8)  # rewards [P, G]


def _update(policy, batch: StepBatch, max_grad_norm: float) -> dict:
    model = copy.deepcopy(policy.model).train()
    config = TrainConfig(lr=1e-4, max_grad_norm=max_grad_norm, micro_batch_size=4)
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    advantages = compute_advantages("sign", batch.rewards)
    return update_policy(model, build_optimizer(params, config), batch, advantages, config,
                         lr=config.lr,
                         max_length=8)


def test_clipped_says_whether_the_pre_clip_norm_exceeded_max_grad_norm(setup) -> None:
    policy, batch = setup
    unclipped = _update(policy, batch, 0.0)  # 0 switches clipping off
    norm = unclipped["loss/grad_norm"]
    assert norm > 0 and unclipped["loss/clipped"] == 0.0
    below = _update(policy, batch, norm / 2)
    above = _update(policy, batch, norm * 2)
    assert below["loss/clipped"] == 1.0 and above["loss/clipped"] == 0.0
    # the logged norm is the one before clipping: the same whatever max_grad_norm is
    assert below["loss/grad_norm"] == pytest.approx(norm, rel=1e-5)
    assert above["loss/grad_norm"] == pytest.approx(norm, rel=1e-5)
