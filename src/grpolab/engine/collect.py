"""One scored rollout batch: encode the prompts, sample G completions each, score them with the verifier.

The same three steps serve training (``Trainer``), evaluation (``grpolab.evaluation``) and the gradient
analysis (``grpolab gradients``), so all three see prompts, samples and rewards built the same way.
Sampling itself lives in ``grpolab.engine.rollout`` (no reward logic there) and scoring in ``grpolab.rewards``;
with a process verifier the batch also gets per-token rewards (``grpolab.process_rewards``). The trainer
turns a ``ScoredBatch`` into the batch it trains on with ``grpolab.train.batch.StepBatch.from_scored``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from grpolab.engine.rollout import Rollout, encode_prompts, sample
from grpolab.process_rewards import token_rewards
from grpolab.rewards import Scores, score_batch
from grpolab.tasks import Problem

__all__ = ["ScoredBatch", "collect_batch"]


@dataclass
class ScoredBatch:
    """A rollout of P problems x G samples and its scores.

    Attributes:
        problems: the P problems, in order.
        rollout: the sampled completions ([P * G] rows, problem-major).
        scores: the verifier's rewards [P * G] and error counts.
        token_rewards: [P * G, T] float64 per-token rewards (NaN: unrewarded token) when a process verifier
            was given, else None.
    """

    problems: list[Problem]
    rollout: Rollout
    scores: Scores
    token_rewards: torch.Tensor | None = None

    @property
    def rewards(self) -> np.ndarray:
        """Rewards [P, G] (NaN where unscorable)."""
        return self.scores.rewards.reshape(len(self.problems), -1)


def collect_batch(
    model: torch.nn.Module, tokenizer, problems: Sequence[Problem], verifier: Callable, *, num_samples: int,
    max_new_tokens: int, use_chat_template: bool, temperature: float = 1.0, top_p: float = 1.0,
    generator: torch.Generator | None = None, dtype: str = "auto", process_verifier: Callable | None = None,
) -> ScoredBatch:
    """Sample ``num_samples`` completions for each problem (temperature 0: greedy) and score them; with
    ``process_verifier`` (``grpolab.verifiers.process``) also per token."""
    problems = list(problems)
    ids, mask = encode_prompts(tokenizer, [p.prompt for p in problems], use_chat_template=use_chat_template)
    rollout = sample(model, tokenizer, ids, mask, num_samples=num_samples, max_new_tokens=max_new_tokens,
                     temperature=temperature, top_p=top_p, generator=generator, dtype=dtype)
    references = [p.reference for p in problems for _ in range(num_samples)]
    scored = ScoredBatch(problems, rollout, score_batch(verifier, rollout.texts, references))
    if process_verifier is not None:
        scored.token_rewards, _ = token_rewards(tokenizer, rollout.completion_ids, rollout.completion_mask,
                                                rollout.texts, references, process_verifier)
    return scored
