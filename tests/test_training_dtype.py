"""The update under bfloat16 autocast (``TrainConfig.dtype``) against float32 on the same batch.

With one on-policy iteration and beta = 0 the logged policy loss does not depend on the log-probs (the
ratio is exactly 1), so the comparison uses settings where it does: two PPO iterations (the second
sees the ratio after one update) and a KL term to a frozen reference (beta = 0.1).
Tolerances, measured on the embedded model (P = 4, G = 4, T <= 16, lr 1e-4; differences seen on two
batches: policy loss 3e-4 and 3.3e-3 absolute, KL 4% and 10% relative, grad norm 0.7% and 2.3%) and stated here:
loss/policy within 0.01 absolute (its per-token terms are of the order of |advantage| ~ 1), loss/kl
within 15% relative, loss/grad_norm within 5% relative.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.models import load_policy
from grpolab.rollout import encode_prompts, sample
from grpolab.tasks import get_task
from grpolab.training_step import StepBatch, build_optimizer, update_policy


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    policy = load_policy("embedded")
    problems = get_task("arith").train[:4]
    ids, mask = encode_prompts(policy.tokenizer, [p.prompt for p in problems], use_chat_template=False)
    rollout = sample(policy.model.eval(), policy.tokenizer, ids, mask, num_samples=4, max_new_tokens=16,
                     generator=torch.Generator().manual_seed(0))
    rewards = np.array([[1, 0, 0, 1], [1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 1, 0]], dtype=np.float64)  # [P, G]
    return policy, StepBatch.make(problems, rollout, rewards)


def _update(policy, batch: StepBatch, dtype: str) -> dict:
    torch.manual_seed(0)
    model = copy.deepcopy(policy.model).train()
    reference = copy.deepcopy(policy.model).eval()
    config = TrainConfig(dtype=dtype, num_iterations=2, beta=0.1, lr=1e-4, micro_batch_size=8)
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    advantages = compute_advantages("grpo", batch.rewards)
    return update_policy(model, build_optimizer(params, config), batch, advantages, config, lr=config.lr,
                         max_length=16, reference=reference)


def test_bfloat16_autocast_logs_the_float32_loss_within_tolerance(setup) -> None:
    policy, batch = setup
    full, half = _update(policy, batch, "float32"), _update(policy, batch, "bfloat16")
    assert full["loss/kl"] > 0 and full["loss/trained_sequences"] == 16
    assert abs(half["loss/policy"] - full["loss/policy"]) < 0.01
    assert half["loss/kl"] == pytest.approx(full["loss/kl"], rel=0.15)
    assert half["loss/grad_norm"] == pytest.approx(full["loss/grad_norm"], rel=0.05)
    assert half["loss/policy"] != full["loss/policy"]  # autocast really ran in bfloat16
