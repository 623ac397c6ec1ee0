"""``grpolab.overlong``: DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13) on hand-computed lengths."""

from __future__ import annotations

import numpy as np
import pytest

from grpolab.overlong import overlong_penalty, shape_rewards

pytestmark = pytest.mark.fast


def test_penalty_hand_values_cap_16_buffer_4() -> None:
    # L_max 16, L_cache 4: no penalty up to 12 tokens, then ((16 - 4) - |y|) / 4: 13 -> -0.25, 14 -> -0.5, 16 -> -1.
    lengths = np.array([[1, 12, 13], [14, 15, 16]])  # [P, G]
    expected = np.array([[0.0, 0.0, -0.25], [-0.5, -0.75, -1.0]])
    np.testing.assert_allclose(overlong_penalty(lengths, max_length=16, buffer=4, penalty=1.0), expected)
    np.testing.assert_allclose(overlong_penalty(lengths, max_length=16, buffer=4, penalty=0.5), expected / 2)


def test_penalty_stops_at_the_cap() -> None:
    # DAPO's -1 beyond L_max: longer than the cap never happens here, but the penalty does not grow past it.
    assert overlong_penalty(np.array([20]), max_length=16, buffer=4, penalty=1.0).tolist() == [-1.0]


def test_shaped_rewards_keep_nan_unscorable() -> None:
    rewards = np.array([[1.0, np.nan, 0.0]])
    shaped = shape_rewards(rewards, np.array([[16, 16, 13]]), max_length=16, buffer=4, penalty=1.0)
    np.testing.assert_allclose(shaped, [[0.0, np.nan, -0.25]])


def test_bad_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match="buffer >= 1"):
        overlong_penalty(np.array([3]), max_length=16, buffer=0, penalty=1.0)
