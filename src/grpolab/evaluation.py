"""Evaluate a policy on a task's held-out split: greedy accuracy, pass@k for k = 1..n, per-prompt counts, and
the sampled-evaluation statistics papers report (avg@n, pass@k, maj@k, pass^k with standard errors over prompts).

pass@k uses the unbiased estimator of Chen et al. 2021 (arXiv 2107.03374) over n samples per prompt
(``grpolab.diagnostics.pass_at_k_curve``); ``sampled`` holds the same curve with its standard errors beside
avg@n, maj@k (votes on the verifier's extracted answers, ``grpolab.verifiers.votes``; left out for a verifier
without them) and pass^k (``grpolab.diagnostics.sampled``). Unscorable samples count as failures here (evaluation asks
"was a correct answer produced?"), unlike training, where they are left out of group statistics.

Bounded memory: before sampling, the prompts are checked against the model's context and the sampling of
``n`` per prompt against the memory available (``grpolab.engine.fit``); each batch is sampled in chunks that
keep its KV cache under ``engine.memory.sampler_budget`` with the same result (``engine.rollout``).
Prompts cut to fit the context are counted in ``prompts_truncated``. The weights are held fixed for the whole
evaluation (``engine.rollout.fixed_weights``): the lean sampler copies them once, not once per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from grpolab import verifiers
from grpolab.diagnostics import pass_at_k_curve
from grpolab.diagnostics.majority import Votes, votes_of
from grpolab.diagnostics.sampled import sampled_metrics
from grpolab.engine.collect import collect_batch
from grpolab.engine.fit import check_evaluation_fits
from grpolab.engine.rollout import fixed_weights
from grpolab.models import Policy
from grpolab.rewards import check_scores
from grpolab.tasks import Problem, Task
from grpolab.verifiers.votes import vote_key_fn

__all__ = ["EvalResult", "evaluate", "sample_successes"]


@dataclass
class _Counts:
    """Per-problem correct counts of one pass over the problems, with its mean length, unscorable share, the
    number of prompts cut to fit the model's context and each problem's votes (None: no vote keys)."""

    correct: np.ndarray
    mean_length: float
    unscorable: float
    truncated: int = 0
    votes: list[Votes] | None = None


@dataclass
class EvalResult:
    """Evaluation of one policy on a set of problems.

    Attributes:
        greedy_accuracy: share of problems whose greedy completion is correct.
        n: samples per problem used for pass@k (0 if none were drawn).
        pass_at_k: {k: mean pass@k} for k = 1..n.
        successes: per-problem number of correct samples out of n (same order as ``problem_ids``).
        problem_ids: the problems evaluated.
        families: each problem's family (same order; "" when the task has none).
        mean_length: mean greedy completion length in tokens.
        split: the split evaluated, ``test`` or ``validation``.
        greedy_unscorable: share of greedy completions the verifier could not score (no answer found).
        unscorable: the same share over the ``n`` samples per problem (0 if none were drawn).
        prompts_truncated: problems whose prompt kept only its last tokens to fit the model's context beside
            ``max_new_tokens`` (their completions are still scored).
        sampled: ``SampledMetrics.to_dict()`` of the n samples: ``metrics`` and ``se`` keyed ``avg@n``,
            ``pass@k``, ``maj@k`` and ``pass^k`` for k = 1..n, and lighteval's names (empty if none were drawn).
        votes: each problem's votes over its n samples (same order as ``problem_ids``): ``correct``, the sizes of
            the ``wrong`` answers' classes (largest first) and the ``abstained`` samples with no answer, all that
            maj@k depends on, so that it can be recomputed from the file (``Votes(**row)``); None where the
            verifier extracts no answers to vote on.
    """

    greedy_accuracy: float
    n: int
    pass_at_k: dict[int, float] = field(default_factory=dict)
    successes: list[int] = field(default_factory=list)
    problem_ids: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    mean_length: float = 0.0
    split: str = "test"
    greedy_unscorable: float = 0.0
    unscorable: float = 0.0
    prompts_truncated: int = 0
    sampled: dict[str, Any] = field(default_factory=dict)
    votes: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
        if data["votes"] is None:  # no answers to vote on: no key (an eval.jsonl row holds no nulls but numbers)
            del data["votes"]
        return data


def _correct_counts(
    policy: Policy, task: Task, problems: Sequence[Problem], samples: int, temperature: float,
    max_new_tokens: int, generator: torch.Generator | None, batch_prompts: int,
    on_chunk: Callable[[int], None] | None = None,
) -> _Counts:
    """Per-problem count of correct completions out of ``samples``, the mean completion length and the
    share of completions the verifier could not score; ``on_chunk(prompts)`` is called after each batch."""
    verifier = verifiers.get_verifier(task.verifier)
    vote_key = vote_key_fn(task.verifier)
    counts, lengths, unscored, truncated, votes = [], [], 0, 0, []
    for start in range(0, len(problems), batch_prompts):
        chunk = problems[start : start + batch_prompts]
        batch = collect_batch(policy.model, policy.tokenizer, chunk, verifier, num_samples=samples,
                              max_new_tokens=max_new_tokens, use_chat_template=task.use_chat_template,
                              temperature=temperature, generator=generator)
        check_scores(batch.scores, verifier_name=task.verifier, where="evaluation")
        correct = np.nan_to_num(batch.rewards, nan=0.0) >= 0.5  # [P, n]
        counts.append(correct.sum(axis=1))  # [P]
        if vote_key is not None:
            votes += _votes(correct, batch.rollout.texts, vote_key)
        lengths.append(batch.rollout.lengths.float().mean().item())
        unscored += int(np.isnan(batch.rewards).sum())
        truncated += batch.rollout.prompts_truncated
        if on_chunk is not None:
            on_chunk(len(chunk))
    correct_counts = np.concatenate(counts) if counts else np.zeros(0, dtype=int)
    drawn = len(problems) * samples
    return _Counts(correct_counts, float(np.mean(lengths) if lengths else 0), unscored / drawn if drawn else 0.0,
                   truncated, votes if vote_key is not None else None)


def _votes(correct: np.ndarray, texts: Sequence[str], vote_key) -> list[Votes]:
    """Each problem's votes from its verdicts [P, n] and its completions [P * n] (problem-major)."""
    n = correct.shape[1]
    return [votes_of(ok, [None if good else vote_key(text) for good, text in zip(ok, texts[i * n : (i + 1) * n],
                                                                                   strict=True)])
            for i, ok in enumerate(correct)]


def _token_budget(policy: Policy, task: Task, problems: Sequence[Problem], samples: int,
                  max_new_tokens: int | None) -> int:
    """The completion budget after checking that the prompts fit the context and the sampling fits memory."""
    return check_evaluation_fits(policy.model, policy.tokenizer, [p.prompt for p in problems], samples=samples,
                                 max_new_tokens=max_new_tokens or task.max_new_tokens,
                                 use_chat_template=task.use_chat_template, explicit=max_new_tokens is not None)


def evaluate(
    policy: Policy, task: Task, *, n: int = 8, limit: int | None = None, seed: int = 0,
    temperature: float = 1.0, max_new_tokens: int | None = None, batch_prompts: int = 64, split: str = "test",
) -> EvalResult:
    """Greedy accuracy and (if n > 0) pass@k of ``policy`` on the first ``limit`` problems of ``split``
    (``test``, or ``validation`` for hyper-parameter selection)."""
    if split not in ("test", "validation"):
        raise ValueError(f"split must be test or validation, got {split!r}")
    pool = task.test if split == "test" else task.validation
    problems = list(pool[:limit] if limit else pool)
    budget = _token_budget(policy, task, problems, n, max_new_tokens)
    with _evaluating(policy.model):
        greedy = _correct_counts(policy, task, problems, 1, 0.0, budget, None, batch_prompts)
        result = EvalResult(float(greedy.correct.mean()) if len(greedy.correct) else 0.0, n,
                            problem_ids=[p.id for p in problems], families=[p.family for p in problems],
                            mean_length=greedy.mean_length, split=split, greedy_unscorable=greedy.unscorable,
                            prompts_truncated=greedy.truncated)
        if n > 0 and problems:
            generator = torch.Generator().manual_seed(seed)
            sampled = _correct_counts(policy, task, problems, n, temperature, budget, generator, batch_prompts)
            counts = sampled.correct
            result.successes = [int(c) for c in counts]
            result.unscorable = sampled.unscorable
            curve = pass_at_k_curve(np.full(len(counts), n), counts)
            result.pass_at_k = {int(k): float(v) for k, v in curve.items()}
            result.sampled = sampled_metrics(np.full(len(counts), n), counts, sampled.votes).to_dict()
            if sampled.votes is not None:
                result.votes = [{"correct": v.correct, "wrong": list(v.wrong), "abstained": v.abstained}
                                for v in sampled.votes]
    return result


def sample_successes(
    policy: Policy, task: Task, problems: Sequence[Problem], *, n: int, seed: int = 0, temperature: float = 1.0,
    max_new_tokens: int | None = None, batch_prompts: int = 64, on_chunk: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Per-problem count of correct completions out of ``n`` sampled ones, successes [P], for any problems (a
    train split's too: ``grpolab preflight``), with the same fit checks, seeding and scoring as ``evaluate``
    (unscorable samples count as failures); ``on_chunk(prompts)`` reports progress after each batch."""
    budget = _token_budget(policy, task, problems, n, max_new_tokens)
    with _evaluating(policy.model):
        generator = torch.Generator().manual_seed(seed)
        return _correct_counts(policy, task, problems, n, temperature, budget, generator, batch_prompts,
                               on_chunk).correct.astype(int)


@contextmanager
def _evaluating(model: torch.nn.Module) -> Iterator[None]:
    """A block with ``model`` in eval mode (its mode restored after) and its weights held fixed
    (``fixed_weights``: the lean sampler copies them at the first batch only)."""
    was_training = model.training
    model.eval()
    try:
        with fixed_weights(model):
            yield
    finally:
        model.train(was_training)
