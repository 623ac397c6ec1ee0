"""``grpolab.rewards.score_batch``: rewards in order, and every way a verifier can fail counted, never raised.

The table of bad return values (NaN, inf, None, str, huge int, exceptions) is in
``tests/reliability/test_bad_input.py``; here: order, counting and the first error's message.
"""

from __future__ import annotations

import numpy as np
import pytest

from grpolab.rewards import score_batch


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
