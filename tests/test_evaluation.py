"""Evaluation: greedy accuracy, pass@k and the share of completions the verifier could not score."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from grpolab import verifiers
from grpolab.diagnostics.majority import Votes
from grpolab.diagnostics.sampled import sampled_metrics
from grpolab.evaluation import evaluate
from grpolab.models import load_policy
from grpolab.tasks import get_task

pytestmark = pytest.mark.fast


@verifiers.register("test-never-scores")
def _never_scores(completion: str, reference: str) -> float | None:
    return None


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return load_policy("embedded")


def test_unscorable_completions_are_counted_as_failures_and_reported(policy) -> None:
    task = replace(get_task("reverse"), verifier="test-never-scores")
    result = evaluate(policy, task, n=2, limit=6, seed=0)
    assert result.greedy_unscorable == 1.0 and result.unscorable == 1.0
    assert result.greedy_accuracy == 0.0 and result.pass_at_k[1] == 0.0


def test_a_verifier_that_scores_everything_reports_no_unscorable(policy) -> None:
    task = get_task("reverse")
    result = evaluate(policy, task, n=2, limit=6, seed=0)
    assert result.greedy_unscorable == 0.0 and result.unscorable == 0.0
    assert result.to_dict()["unscorable"] == 0.0
    assert len(result.successes) == 6 and all(0 <= count <= 2 for count in result.successes)


def test_the_sampled_metrics_sit_beside_pass_at_k(policy) -> None:
    result = evaluate(policy, get_task("reverse"), n=4, limit=6, seed=0)
    sampled = result.sampled["metrics"]
    assert result.sampled["n"] == 4 and result.sampled["prompts"] == 6
    assert [sampled[f"pass@{k}"] for k in range(1, 5)] == [result.pass_at_k[k] for k in range(1, 5)]
    recomputed = sampled_metrics(np.full(6, 4), result.successes).to_dict()
    assert {key: v for key, v in sampled.items() if not key.startswith("maj@")} == recomputed["metrics"]
    tol = 4 * ((4 + 1) ** 2 + 6) * np.finfo(np.float64).eps  # as tests/diagnostics/test_sampled.py derives it
    assert sampled["maj@1"] == pytest.approx(sampled["avg@n"], abs=tol)
    assert all(sampled[f"pass^{k}"] - tol <= sampled[f"maj@{k}"] <= sampled[f"pass@{k}"] + tol for k in range(1, 5))
    assert set(result.sampled["se"]) == set(sampled) and result.to_dict()["sampled"] == result.sampled
    written = result.to_dict()  # what grpolab eval --out writes: maj@k and its SE recomputable from it
    votes = [Votes(row["correct"], tuple(row["wrong"]), row["abstained"]) for row in written["votes"]]
    assert [vote.n for vote in votes] == [4] * 6 and [vote.correct for vote in votes] == result.successes
    assert sampled_metrics(np.full(6, 4), written["successes"], votes).to_dict() == result.sampled


def test_a_verifier_without_vote_keys_gives_no_maj_at_k(policy) -> None:
    task = replace(get_task("reverse"), verifier="test-never-scores")
    result = evaluate(policy, task, n=2, limit=3, seed=0)
    sampled = result.sampled["metrics"]
    assert "pass^2" in sampled and not any(key.startswith("maj@") for key in sampled)
    assert result.votes is None
