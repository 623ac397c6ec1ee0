"""A small batch sampled from the embedded model on ``arith`` with given rewards: the update tests' input."""

from __future__ import annotations

import numpy as np
import torch

from grpolab.engine.rollout import encode_prompts, sample
from grpolab.models import Policy, load_policy
from grpolab.tasks import get_task
from grpolab.train.batch import StepBatch

# Rewards [P, G] for 4 prompts x 4 samples, every group mixed (so every advantage estimator gives a gradient).
MIXED_REWARDS = np.array([[1, 0, 0, 1], [1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 1, 0]], dtype=np.float64)


def sampled_arith_batch(rewards: np.ndarray, max_new_tokens: int) -> tuple[Policy, StepBatch]:
    """(the embedded policy, a batch of its samples on the first P arith prompts, G each, seed 0) with the
    given rewards [P, G] in place of the verifier's."""
    torch.set_num_threads(1)
    policy = load_policy("embedded")
    prompts, group_size = rewards.shape
    problems = get_task("arith").train[:prompts]
    ids, mask = encode_prompts(policy.tokenizer, [p.prompt for p in problems], use_chat_template=False)
    rollout = sample(policy.model.eval(), policy.tokenizer, ids, mask, num_samples=group_size,
                     max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(0))
    return policy, StepBatch.make(problems, rollout, rewards)
