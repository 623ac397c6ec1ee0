"""grpolab.engine.collect.collect_batch: encode, sample and score, with references aligned problem-major."""

from __future__ import annotations

import numpy as np
import torch

from grpolab.engine.collect import collect_batch
from grpolab.models import load_policy
from grpolab.tasks import get_task


def test_rewards_are_per_problem_and_sample_and_match_the_references() -> None:
    policy = load_policy("embedded")
    problems = get_task("reverse").test[:3]
    first = problems[0].reference

    def is_first_reference(completion: str, reference: str) -> float:
        return float(reference == first)

    batch = collect_batch(policy.model, policy.tokenizer, problems, is_first_reference, num_samples=2,
                          max_new_tokens=7, use_chat_template=False, generator=torch.Generator().manual_seed(0))
    assert batch.rewards.shape == (3, 2) and len(batch.rollout.texts) == 6
    np.testing.assert_array_equal(batch.rewards, [[1, 1], [0, 0], [0, 0]])  # row p holds problem p's samples


def test_same_generator_seed_gives_the_same_batch() -> None:
    policy = load_policy("embedded")
    problems = get_task("reverse").test[:4]

    def run() -> list[str]:
        return collect_batch(policy.model, policy.tokenizer, problems, lambda c, r: float(c.strip() == r),
                             num_samples=3, max_new_tokens=7, use_chat_template=False,
                             generator=torch.Generator().manual_seed(5)).rollout.texts

    assert run() == run()
