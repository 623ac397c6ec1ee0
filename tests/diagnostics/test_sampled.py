"""The sampled-evaluation metrics (``grpolab.diagnostics.sampled``): identities between them over random
prompt sets, hand-computed values, standard errors and lighteval's names."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.diagnostics.majority import Votes
from grpolab.diagnostics.sampled import METRICS, pass_hat_k, sampled_metrics, standard_error
from grpolab.errors import UserError

pytestmark = pytest.mark.fast

EPS = np.finfo(np.float64).eps


def tolerance(n: int, prompts: int) -> float:
    """Per-prompt values carry at most about (n + 1)^2 eps of relative error (a product or sum of n + 1
    factors, or maj@k's convolutions); a mean over P prompts adds P eps (Higham 2002, 4.2). Times 4 for slack."""
    return 4 * ((n + 1) ** 2 + prompts) * EPS


@st.composite
def prompt_sets(draw) -> tuple[int, np.ndarray]:
    n = draw(st.integers(1, 12))
    counts = draw(st.lists(st.integers(0, n), min_size=1, max_size=30))
    return n, np.array(counts)


@settings(max_examples=80, deadline=None)
@given(prompt_sets())
def test_the_identities_between_the_metrics(data: tuple[int, np.ndarray]) -> None:
    n, c = data
    tol = tolerance(n, len(c))
    values = {key: e.mean for key, e in sampled_metrics(np.full(len(c), n), c).values.items()}
    avg = c.mean() / n
    assert values["avg@n"] == pytest.approx(avg, abs=tol)
    assert values["pass@1"] == pytest.approx(avg, abs=tol) and values["pass^1"] == pytest.approx(avg, abs=tol)
    assert values[f"pass@{n}"] == pytest.approx(np.mean(c > 0), abs=tol)
    assert values[f"pass^{n}"] == pytest.approx(np.mean(c == n), abs=tol)
    passk = [values[f"pass@{k}"] for k in range(1, n + 1)]
    hat = [values[f"pass^{k}"] for k in range(1, n + 1)]
    assert np.all(np.diff(passk) >= -tol) and np.all(np.diff(hat) <= tol)  # pass@k grows with k, pass^k falls
    assert not any(key.startswith("maj@") for key in values)  # no votes, no maj@k


@settings(max_examples=50, deadline=None)
@given(prompt_sets(), st.randoms(use_true_random=False))
def test_maj_at_1_is_avg_at_n_and_maj_at_k_lies_between_pass_hat_k_and_pass_at_k(data, rng) -> None:
    n, c = data
    votes = []
    for correct in c:  # the wrong samples split at random into answer classes and abstentions
        wrong = [rng.randrange(3) for _ in range(n - correct)]  # 0: abstain, 1 or 2: two wrong answers
        sizes = tuple(sorted((s for s in (wrong.count(1), wrong.count(2)) if s), reverse=True))
        votes.append(Votes(int(correct), sizes, wrong.count(0)))
    tol = tolerance(n, len(c))
    values = {key: e.mean for key, e in sampled_metrics(np.full(len(c), n), c, votes).values.items()}
    assert values["maj@1"] == pytest.approx(values["avg@n"], abs=tol)
    for k in range(1, n + 1):
        assert values[f"pass^{k}"] - tol <= values[f"maj@{k}"] <= values[f"pass@{k}"] + tol


def test_hand_computed_values_and_standard_errors() -> None:
    n, c = np.array([4, 4, 4]), np.array([4, 2, 0])
    result = sampled_metrics(n, c)
    per_prompt_pass2 = np.array([1.0, 1 - 1 / 6, 0.0])  # 1 - C(2, 2) / C(4, 2) for c = 2
    per_prompt_hat2 = np.array([1.0, 1 / 6, 0.0])  # C(2, 2) / C(4, 2)
    tol = tolerance(4, 3)
    assert result.values["pass@2"].mean == pytest.approx(per_prompt_pass2.mean(), abs=tol)
    assert result.values["pass^2"].mean == pytest.approx(per_prompt_hat2.mean(), abs=tol)
    assert result.values["pass^2"].se == pytest.approx(per_prompt_hat2.std(ddof=1) / math.sqrt(3), abs=tol)
    assert result.values["avg@n"].se == pytest.approx(np.std([1, 0.5, 0], ddof=1) / math.sqrt(3), abs=tol)
    assert pass_hat_k(4, 2, 2)[0] == pytest.approx(1 / 6, abs=tol)


def test_one_prompt_has_no_standard_error_and_json_says_null() -> None:
    assert math.isnan(standard_error([0.5]))
    data = sampled_metrics([2], [1]).to_dict()
    assert data["se"]["pass@1"] is None and data["metrics"]["pass@2"] == 1.0 and data["prompts"] == 1


def test_lighteval_names_sit_beside_grpolab_keys() -> None:
    result = sampled_metrics([64, 64], [3, 10], [Votes(3, (61,)), Votes(10, (), 54)], ks=[1, 64])
    assert result.lighteval == {"avg@n": "avg@n:n=64", "pass@1": "pass@k:k=1&n=64", "pass@64": "pass@k:k=64&n=64",
                                "maj@1": "maj@n:n=1", "maj@64": "maj@n:n=64"}
    assert list(result.values) == ["avg@n", "pass@1", "pass@64", "maj@1", "maj@64", "pass^1", "pass^64"]
    assert [m.family for m in METRICS] == ["avg@n", "pass@k", "maj@k", "pass^k"]


def test_prompts_of_different_n_get_no_lighteval_name_that_carries_an_n() -> None:
    """lighteval samples one n for every document: "pass@k:k=1&n=4" named a mean over prompts of 4 and 16 samples
    (the smallest n); now only the names without an n are given."""
    result = sampled_metrics([4, 16], [1, 8], [Votes(1, (3,)), Votes(8, (8,))], ks=[1, 4])
    assert result.lighteval == {"maj@1": "maj@n:n=1", "maj@4": "maj@n:n=4"}
    assert result.n == 4 and set(result.values) >= {"avg@n", "pass@1", "pass@4"}


@pytest.mark.parametrize(("n", "c", "ks", "message"), [
    ([4], [5], None, "0 <= c <= n"), ([], [], None, "at least one prompt"), ([4, 2], [1, 1], [3], "1 <= k <= n"),
])
def test_bad_counts_are_refused(n, c, ks, message) -> None:
    with pytest.raises(UserError, match=message):
        sampled_metrics(n, c, ks=ks)


def test_votes_that_disagree_with_the_counts_are_refused() -> None:
    with pytest.raises(UserError, match="votes must hold"):
        sampled_metrics([4], [2], [Votes(1, (3,))])
