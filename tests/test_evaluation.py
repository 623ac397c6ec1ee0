"""Evaluation: greedy accuracy, pass@k and the share of completions the verifier could not score."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from grpolab import verifiers
from grpolab.evaluation import evaluate
from grpolab.models import load_policy
from grpolab.tasks import get_task


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
