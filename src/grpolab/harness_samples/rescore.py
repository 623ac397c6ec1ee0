"""Re-score a harness's responses with a grpolab verifier and compute the sampled metrics.

The verifier is ``--verifier`` when given, else the one ``TASK_VERIFIERS`` names for the task (matched on
each ``|``-separated part of the harness's task name, as a whole word or a prefix followed by ``_``, ``-``,
``:`` or a digit: ``gsm8k_cot``, ``minerva_math_algebra``, ``aime24``, ``gsm8k|0``). A task with no row is
refused in one line that names ``--verifier``.

Every response is scored (``grpolab.rewards.score_batch``: a verifier that raises or times out makes the
response unscorable; ``check_scores`` stops when that is most of them). As in ``grpolab.evaluation``, an
unscorable response counts as wrong; their number is reported. A file none of whose responses the verifier can
score (it reads no answer from any reference: the wrong verifier) is refused. A response and reference pair that repeats
is scored once. Wrong responses get their vote key (``grpolab.verifiers.votes``) for maj@k, which is left
out for a verifier without vote keys.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from grpolab import verifiers
from grpolab.diagnostics.majority import Votes, votes_of
from grpolab.diagnostics.sampled import SampledMetrics, sampled_metrics
from grpolab.errors import UserError
from grpolab.harness_samples.records import HarnessSamples
from grpolab.rewards import check_scores, score_batch
from grpolab.verifiers.votes import vote_key_fn

__all__ = ["TASK_VERIFIERS", "TaskScore", "rescore", "verifier_for"]

TASK_VERIFIERS: tuple[tuple[str, str], ...] = (
    ("gsm8k", "gsm8k"),
    ("minerva_math", "math_final"),  # their answers come boxed, on Minerva's final-answer line or between $ signs
    ("hendrycks_math", "math_final"),
    ("math", "math"),
    ("aime", "math_final"),
    ("amc", "math_final"),
    # the tasks of `grpolab lm-eval-tasks` (grpolab.integrations.lm_eval.tasks), each with its grpolab task's verifier
    ("grpolab_reverse", "exact"),
    ("grpolab_arith", "exact"),
    ("grpolab_gsm8k", "gsm8k"),
    ("grpolab_math500", "math"),
)
"""(task name or prefix, verifier): the harnesses' task names grpolab knows a verifier for."""


@dataclass
class TaskScore:
    """One file's re-scored samples: the verifier used, per-prompt n and c, unscorable responses, metrics."""

    samples: HarnessSamples
    verifier: str
    n: np.ndarray
    correct: np.ndarray
    unscorable: int
    metrics: SampledMetrics
    votes: list[Votes] | None = None


def _matches(part: str, name: str) -> bool:
    return re.fullmatch(rf"{re.escape(name)}(?:[_\-:0-9].*)?", part) is not None


def verifier_for(task: str, chosen: str | None = None, *, where: str = "") -> str:
    """The verifier of ``task``: ``chosen`` when given, else ``TASK_VERIFIERS``' row for it."""
    if chosen:
        return chosen
    for part in task.split("|"):
        for name, verifier in TASK_VERIFIERS:
            if _matches(part.strip(), name):
                return verifier
    raise UserError(f"{where or task}: grpolab knows no verifier for task {task!r}; name one with --verifier "
                    f"({', '.join(verifiers.available())}, or a dotted path package.module:function)")


def _unique_rewards(verifier, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, object]:
    """Rewards of every (response, reference) pair, each distinct pair scored once; and the ``Scores``."""
    index: dict[tuple[str, str], int] = {}
    inverse = np.fromiter((index.setdefault(pair, len(index)) for pair in pairs), dtype=np.int64, count=len(pairs))
    distinct = list(index)
    scores = score_batch(verifier, [r for r, _ in distinct], [ref for _, ref in distinct])
    return scores.rewards[inverse], scores


def _votes(samples: HarnessSamples, correct: list[np.ndarray], verifier: str) -> list[Votes] | None:
    key = vote_key_fn(verifier)
    if key is None:
        return None
    return [votes_of(ok, [None if good else key(text) for good, text in zip(ok, texts, strict=True)])
            for ok, texts in zip(correct, samples.responses, strict=True)]


def rescore(samples: HarnessSamples, verifier: str | None = None) -> TaskScore:
    """Score every response of ``samples`` with its task's verifier (or ``verifier``) and compute avg@n,
    pass@k, maj@k and pass^k for k = 1..min n, each with its standard error over prompts."""
    name = verifier_for(samples.task, verifier, where=str(samples.path))
    fn = verifiers.get_verifier(name)
    pairs = [(text, ref) for texts, ref in zip(samples.responses, samples.references, strict=True) for text in texts]
    rewards, scores = _unique_rewards(fn, pairs)
    check_scores(scores, verifier_name=name, where=str(samples.path))
    if rewards.size and np.isnan(rewards).all():  # a table of zeros would look like a model that is always wrong
        raise UserError(f"{samples.path}: the verifier {name} scores none of the {rewards.size} responses: it reads no "
                        f"answer from the references (the first is {samples.references[0][:80]!r}); name the "
                        "verifier that reads them with --verifier")
    n = np.array([len(texts) for texts in samples.responses], dtype=np.int64)
    flat_ok = np.nan_to_num(rewards, nan=0.0) >= 0.5  # unscorable counts as wrong, as in grpolab.evaluation
    correct = np.split(flat_ok, np.cumsum(n)[:-1])  # [P] arrays of [n_i]
    counts = np.array([int(ok.sum()) for ok in correct], dtype=np.int64)
    votes = _votes(samples, correct, name)
    return TaskScore(samples, name, n, counts, int(np.isnan(rewards).sum()), sampled_metrics(n, counts, votes),
                     votes)
