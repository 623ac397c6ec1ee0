"""Per-token log-probability shifts between the start policy and a run's final policy, on one fixed set of
completions drawn from the start policy, and the answer-format rates of sampled completions.

Shapes: P prompts, n samples each, B = P * n completions (prompt-major), T completion tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from grpolab.devices import model_device, to_host
from grpolab.engine.collect import ScoredBatch, collect_batch
from grpolab.engine.fit import check_evaluation_fits
from grpolab.engine.rollout import token_logprobs
from grpolab.mechanism.token_classes import CONTENT, FORMAT, content_mask
from grpolab.tasks import Problem
from grpolab.verifiers import gsm8k

__all__ = ["FixedCompletions", "completion_logprobs", "draw", "format_rates", "shift_rows"]

OUTCOMES = ("correct", "wrong")


@dataclass
class FixedCompletions:
    """Completions sampled once from the start policy, and what every run's shift is measured on.

    Attributes:
        batch: the scored rollout ([B] completions, rewards NaN where unscorable).
        content: [B, T] True at content tokens (``token_classes``), False at format tokens and padding.
        correct: [B] True where the verifier gave reward 1 (unscorable completions count as wrong, as in
            ``grpolab.evaluation``).
        start_logprobs: [B, T] log-probabilities of the completion tokens under the start policy.
    """

    batch: ScoredBatch
    content: torch.Tensor
    correct: torch.Tensor
    start_logprobs: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """[B, T] bool: the completion tokens (through the first EOS)."""
        return self.batch.rollout.completion_mask.bool()


def draw(model: torch.nn.Module, tokenizer, problems: Sequence[Problem], verifier: Callable, *, samples: int,
         seed: int, temperature: float, max_new_tokens: int, use_chat_template: bool) -> ScoredBatch:
    """``samples`` completions per problem from ``model``, seeded by ``seed`` alone, scored by ``verifier``;
    settings that cannot fit in memory are refused first in one line naming ``grpolab mechanism``'s own flags."""
    check_evaluation_fits(model, tokenizer, [problem.prompt for problem in problems], samples=samples,
                          max_new_tokens=max_new_tokens, use_chat_template=use_chat_template,
                          where=f"{len(problems)} test prompts", lower="--samples")
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    return collect_batch(model, tokenizer, problems, verifier, num_samples=samples, max_new_tokens=max_new_tokens,
                         use_chat_template=use_chat_template, temperature=temperature, generator=generator)


@torch.no_grad()
def completion_logprobs(model: torch.nn.Module, batch: ScoredBatch, *, temperature: float,
                        rows: int = 16) -> torch.Tensor:
    """[B, T] float64 log-probabilities of the batch's completion tokens under ``model`` at ``temperature``
    (the policy the trainer optimises), ``rows`` sequences per forward pass; 0 after the first EOS."""
    rollout = batch.rollout
    model.eval()
    width = rollout.completion_ids.shape[1]
    chunks = []
    for start in range(0, rollout.input_ids.shape[0], rows):
        part = slice(start, start + rows)
        device = model_device(model)
        logprobs, _ = token_logprobs(model, rollout.input_ids[part].to(device), rollout.attention_mask[part].to(device),
                                     width, temperature=temperature)
        chunks.append(to_host(logprobs).double())
    return torch.cat(chunks) * rollout.completion_mask


def fix(batch: ScoredBatch, tokenizer, start_logprobs: torch.Tensor) -> FixedCompletions:
    """The fixed set of completions: ``batch`` with its token classes, outcomes and start log-probs."""
    rollout = batch.rollout
    correct = torch.from_numpy(np.nan_to_num(batch.scores.rewards, nan=0.0) >= 0.5)
    return FixedCompletions(batch, content_mask(rollout.completion_ids, rollout.completion_mask, tokenizer),
                            correct, start_logprobs)


def shift_rows(fixed: FixedCompletions, end_logprobs: torch.Tensor) -> list[dict]:
    """Mean shift of the completion tokens from the start to the end policy, for each token class (format,
    content, all) and outcome (correct, wrong, all): one dict per pair with ``tokens``, ``completions``,
    ``dlogp`` (mean of log p_end - log p_start), ``dprob`` (mean of p_end - p_start) and the mean
    ``start_logprob`` / ``end_logprob``; means are NaN where a pair has no token."""
    start, end = fixed.start_logprobs, end_logprobs
    classes = {FORMAT: fixed.mask & ~fixed.content, CONTENT: fixed.content, "all": fixed.mask}
    outcomes = {"correct": fixed.correct, "wrong": ~fixed.correct, "all": torch.ones_like(fixed.correct)}
    rows = []
    for token_class, in_class in classes.items():
        for outcome, chosen in outcomes.items():
            selected = in_class & chosen[:, None]  # [B, T]
            tokens = int(selected.sum())
            rows.append({"token_class": token_class, "outcome": outcome, "tokens": tokens,
                         "completions": int(selected.any(dim=1).sum()),
                         "dlogp": _mean(end - start, selected), "dprob": _mean(end.exp() - start.exp(), selected),
                         "start_logprob": _mean(start, selected), "end_logprob": _mean(end, selected)})
    return rows


def _mean(values: torch.Tensor, selected: torch.Tensor) -> float:
    return float(values[selected].mean()) if bool(selected.any()) else float("nan")


def format_rates(batch: ScoredBatch, verifier_name: str) -> dict[str, float]:
    """Answer-format rates of sampled completions [B]: ``unscorable`` (the verifier returned None),
    ``no_number`` (no ASCII digit at all), ``no_answer_form`` (none of ``#### N``, ``\\boxed{N}``, "the answer
    is N"; only for the gsm8k verifiers, whose strict forms these are) and ``accuracy`` (reward 1)."""
    rewards = batch.scores.rewards
    texts = batch.rollout.texts
    rates = {"unscorable": float(np.isnan(rewards).mean()),
             "no_number": float(np.mean([not any(c.isascii() and c.isdigit() for c in t) for t in texts])),
             "accuracy": float((np.nan_to_num(rewards, nan=0.0) >= 0.5).mean())}
    if verifier_name.startswith("gsm8k"):
        rates["no_answer_form"] = float(np.mean([gsm8k.extract_strict(t) is None for t in texts]))
    return rates
