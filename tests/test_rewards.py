"""``grpolab.rewards.score_batch``: rewards in order, and every way a verifier can fail counted, never raised;
``check_scores``: a verifier that fails on most of a batch stops the run.

The table of bad return values (NaN, inf, None, str, huge int, exceptions) is in
``tests/reliability/test_bad_input.py``; here: order, counting and the first error's message.
"""

from __future__ import annotations

import numpy as np
import pytest

from grpolab.errors import UserError
from grpolab.rewards import Scores, check_scores, score_batch
from grpolab.verifiers._user import VerifierTimeout

pytestmark = pytest.mark.fast


def test_rewards_keep_the_order_of_the_completions() -> None:
    scores = score_batch(lambda completion, reference: len(completion) / 10, ["a", "abc", "ab"], ["", "", ""])
    np.testing.assert_allclose(scores.rewards, [0.1, 0.3, 0.2])
    assert (scores.errors, scores.first_error, scores.unscorable) == (0, None, 0)


def test_errors_are_counted_and_the_first_message_kept() -> None:
    def verifier(completion: str, reference: str) -> float:
        if completion.startswith("bad"):
            raise ValueError(f"cannot read {completion}")
        return float(completion == reference)

    scores = score_batch(verifier, ["bad-1", "x", "bad-2", "y"], ["x", "x", "x", "x"])
    np.testing.assert_array_equal(scores.rewards, [np.nan, 1.0, np.nan, 0.0])
    assert scores.errors == 2 and scores.unscorable == 2
    assert scores.first_error == "ValueError: cannot read bad-1"


def test_none_is_unscorable_but_not_an_error() -> None:
    scores = score_batch(lambda completion, reference: None, ["a", "b"], ["a", "b"])
    assert scores.unscorable == 2 and scores.errors == 0


def test_completions_and_references_must_pair_up() -> None:
    with pytest.raises(ValueError):
        score_batch(lambda completion, reference: 1.0, ["a", "b"], ["a"])


def test_time_outs_are_counted_apart_from_errors_and_warned_about_once() -> None:
    def verifier(completion: str, reference: str) -> float:
        if completion.startswith("slow"):
            raise VerifierTimeout(f"verifier 'my:fn' did not return within 1 s ({completion})")
        return 1.0

    with pytest.warns(RuntimeWarning) as warned:
        scores = score_batch(verifier, ["slow-1", "x", "slow-2"], ["x", "x", "x"])
    np.testing.assert_array_equal(scores.rewards, [np.nan, 1.0, np.nan])
    assert (scores.timeouts, scores.errors, scores.unscorable) == (2, 0, 2)
    assert scores.first_timeout == "verifier 'my:fn' did not return within 1 s (slow-1)"
    assert len(warned) == 1 and "is scored None (unscorable) and the run goes on" in str(warned[0].message)


@pytest.mark.parametrize(
    ("errors", "timeouts", "message"),
    [
        (0, 3, "step 2: the verifier v timed out on 3 of 4 completions (slow); make it return faster"),
        (3, 0, "step 2: the verifier v failed on 3 of 4 completions, first with E; fix the verifier"),
        (2, 1, "step 2: the verifier v failed on 2 of 4 completions (and timed out on 1), first with E;"),
        (1, 2, "step 2: the verifier v timed out on 2 of 4 completions (slow)"),
        (1, 1, None),  # half the batch still scored: the run goes on
        (0, 2, None),
    ],
)
def test_check_scores_stops_on_a_verifier_that_fails_on_most_of_a_batch(errors: int, timeouts: int,
                                                                        message: str | None) -> None:
    scores = Scores(np.full(4, np.nan), errors, "E" if errors else None, timeouts, "slow" if timeouts else None)
    if message is None:
        check_scores(scores, verifier_name="v", where="step 2")
        return
    with pytest.raises(UserError) as error:
        check_scores(scores, verifier_name="v", where="step 2")
    assert message in str(error.value)
