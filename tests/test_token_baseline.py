"""The optimal token baseline (``grpolab.advantages.token_baseline``): a hand-computed per-token table with its zero
tail, a plain loop over tokens, its relation to ``dr_grpo``, its input errors, the statistics the own engine gives
it, and the engines that refuse it. (Its one-token hand table and the registry's property tests are in
tests/test_advantages.py; its parity with verl's in tests/integrations/test_verl_real.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tests.train.test_update_policy import COMPLETIONS, PROMPTS, BagOfTokens, _batch

from grpolab.advantages import TokenStatistics, compute_advantages
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.train.batch import mask_degenerate
from grpolab.train.forward import policy_token_statistics

pytestmark = pytest.mark.fast

NAME = "optimal_token_baseline"
EPS = 1e-8
# Two kinds of token: A drawn at pi = 0.5 with sum pi^2 = 0.5 (w = 1 - 2 pi + sum pi^2 = 0.5), B at pi = 0.25 with
# sum pi^2 = 0.5 (w = 1.0).
A, B = (math.log(0.5), 0.5), (math.log(0.25), 0.5)


def _statistics(rows: list[list[tuple[float, float]]], width: int) -> TokenStatistics:
    """[B, width] statistics from each row's (logprob, sum pi^2) per token; the mask from the rows' lengths."""
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows], dtype=torch.float64)
    pad = [(0.0, 0.0)]
    logprobs = torch.tensor([[lp for lp, _ in r + pad * (width - len(r))] for r in rows], dtype=torch.float64)
    squares = torch.tensor([[s for _, s in r + pad * (width - len(r))] for r in rows], dtype=torch.float64)
    return TokenStatistics(mask, logprobs, squares)


# Group 0, rewards [1, 0, 1]: row 0 tokens A A A (W = 0.5, 1.0, 1.5), row 1 B B (W = 1, 2), row 2 A B (W = 0.5, 1.5).
#   t = 0: b = (0.5 + 0.5) / (0.5 + 1 + 0.5) = 1/2;  t = 1: b = (1.0 + 1.5) / (1.0 + 2 + 1.5) = 5/9;
#   t = 2: row 0 alone reaches it, and is its group's one longest response past the second longest (2 tokens): the
#   zero tail sets its baseline to 0, so A = 1 (without the zero tail b = 1.5 / 1.5 and A = 0).
# Group 1, rewards [0, 0, 0]: every return is 0, and so is every advantage.
# Group 2, rewards [1, NaN, 0]: the NaN row is out of the sums and gets 0; rows 0 and 2 (A A, B B: W = 0.5, 1 and
#   1, 2) give b = 0.5 / 1.5 = 1/3 at t = 0 and 1 / 3 at t = 1.
REWARDS = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, math.nan, 0.0]])  # float64 in, float64 out
ROWS = [[A, A, A], [B, B], [A, B], [A], [B, B, B], [A, A], [A, A], [A, A, A], [B, B]]
WITH_ZERO_TAIL = [[1 - 1 / (2 + EPS), 1 - 2.5 / (4.5 + EPS), 1.0],
                  [-1 / (2 + EPS), -2.5 / (4.5 + EPS), 0.0],
                  [1 - 1 / (2 + EPS), 1 - 2.5 / (4.5 + EPS), 0.0],
                  [0.0] * 3, [0.0] * 3, [0.0] * 3,
                  [1 - 0.5 / (1.5 + EPS), 1 - 1 / (3 + EPS), 0.0],
                  [0.0] * 3,
                  [-0.5 / (1.5 + EPS), -1 / (3 + EPS), 0.0]]


def test_hand_computed_per_token_table_with_the_zero_tail() -> None:
    result = compute_advantages(NAME, REWARDS, token_statistics=_statistics(ROWS, 3))
    np.testing.assert_allclose(result.numpy(), WITH_ZERO_TAIL, rtol=1e-12, atol=1e-12)
    plain = compute_advantages(NAME, REWARDS, token_statistics=_statistics(ROWS, 3), handle_zero_tail=False)
    assert plain[0, 2].item() == pytest.approx(1 - 1.5 / (1.5 + EPS), abs=1e-12)  # ~0: its own return as baseline
    np.testing.assert_allclose(plain[1:].numpy(), np.array(WITH_ZERO_TAIL)[1:], rtol=1e-12, atol=1e-12)


def _loop(rewards: np.ndarray, statistics: TokenStatistics, zero_tail: bool = True) -> np.ndarray:
    """The module docstring's formula, one group, one position and one response at a time."""
    p, g = rewards.shape
    mask, logprobs, squares = (t.double().numpy() for t in (statistics.mask, statistics.logprobs,
                                                              statistics.sum_pi_squared))
    out = np.zeros(mask.shape)
    for group in range(p):
        rows = [group * g + i for i in range(g) if not math.isnan(rewards[group, i])]
        weights = {row: np.cumsum([(1 - 2 * math.exp(logprobs[row, t]) + squares[row, t]) * mask[row, t]
                                   for t in range(mask.shape[1])]) for row in rows}
        lengths = {row: int(mask[row].sum()) for row in rows}
        ordered = [*sorted(lengths.values(), reverse=True), 0]  # a response alone: all of it is a lone tail
        for t in range(mask.shape[1]):
            reach = [row for row in rows if mask[row, t] > 0]
            numerator = sum(rewards[group, row - group * g] * weights[row][t] for row in reach)
            baseline = numerator / (sum(weights[row][t] for row in reach) + EPS)
            for row in reach:
                lone = ordered.count(ordered[0]) == 1 and lengths[row] == ordered[0]
                own = 0.0 if zero_tail and lone and t >= ordered[1] else baseline
                out[row, t] = rewards[group, row - group * g] - own
    return out


def _random_case(seed: int) -> tuple[np.ndarray, TokenStatistics]:
    """Random rewards (some NaN) [P, G] and the statistics of random softmax policies with random lengths."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    p, g, width, vocab = int(rng.integers(1, 5)), int(rng.integers(2, 6)), 7, 9
    rewards = rng.integers(0, 2, size=(p, g)).astype(np.float64)
    rewards[rng.random(rewards.shape) < 0.15] = math.nan
    lengths = torch.randint(1, width + 1, (p * g,), generator=gen)
    mask = (torch.arange(width) < lengths.unsqueeze(1)).double()
    probs = torch.softmax(2 * torch.randn(p * g, width, vocab, generator=gen, dtype=torch.float64), dim=-1)
    drawn = torch.multinomial(probs.view(-1, vocab), 1, generator=gen).view(p * g, width)
    logprobs = probs.gather(-1, drawn.unsqueeze(-1)).squeeze(-1).log() * mask
    return rewards, TokenStatistics(mask, logprobs, (probs**2).sum(-1) * mask)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("zero_tail", [True, False])
def test_vectorised_equals_the_plain_loop(seed: int, zero_tail: bool) -> None:
    rewards, statistics = _random_case(seed)
    result = compute_advantages(NAME, rewards, token_statistics=statistics, handle_zero_tail=zero_tail)
    np.testing.assert_allclose(result.numpy(), _loop(rewards, statistics, zero_tail), rtol=1e-9, atol=1e-9)


def test_uniform_statistics_and_equal_lengths_give_dr_grpo_on_every_token() -> None:
    """Equal W on every response at each position (a uniform policy, equal lengths): the baseline is the group mean."""
    rewards = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    per_token = compute_advantages(NAME, rewards, token_statistics=TokenStatistics.uniform(8, tokens=5, vocab=7))
    expected = compute_advantages("dr_grpo", rewards).reshape(-1, 1).expand(8, 5)
    torch.testing.assert_close(per_token.float(), expected.float(), atol=1e-7, rtol=0)


@pytest.mark.parametrize(("statistics", "match"), [
    (None, "pass token_statistics="),
    (TokenStatistics.uniform(5), r"B = 6 rows \(P \* G\), got shapes"),
    (TokenStatistics(torch.ones(6, 2), torch.full((6, 2), 0.5), torch.full((6, 2), 0.5)), "finite and <= 0"),
    (TokenStatistics(torch.ones(6, 2), torch.full((6, 2), -1.0), torch.full((6, 2), 1.5)), r"in \[0, 1\]"),
    (TokenStatistics(torch.ones(6, 2), torch.full((6, 2), math.nan), torch.full((6, 2), 0.5)), "finite and <= 0"),
])
def test_bad_statistics_are_refused_with_the_estimators_name(statistics: TokenStatistics | None, match: str) -> None:
    with pytest.raises(ValueError, match=rf"'{NAME}'.*{match}"):
        compute_advantages(NAME, [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], token_statistics=statistics)


def test_the_own_engine_statistics_are_the_policys_at_the_sampling_temperature() -> None:
    """``policy_token_statistics``: the log-probability of each completion token and the sum of pi^2 of the full
    softmax (at temperature 0.7), against a forward of the whole sequences by hand; 0 past each completion."""
    model, batch = BagOfTokens(seed=3), _batch(PROMPTS, COMPLETIONS, group_size=3)
    config = TrainConfig(temperature=0.7, micro_batch_size=4)
    statistics = policy_token_statistics(model, batch, config)
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
    with torch.no_grad():
        logits = model(ids, mask).logits[:, batch.prompt_ids.shape[1] - 1 : -1] / 0.7  # [B, T, V]
    probs = torch.softmax(logits.double(), dim=-1)
    completion = batch.completion_mask.double()
    expected_logprobs = probs.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1).log() * completion
    torch.testing.assert_close(statistics.logprobs.double(), expected_logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(statistics.sum_pi_squared.double(), (probs**2).sum(-1) * completion, atol=1e-5, rtol=0)
    assert torch.equal(statistics.mask, batch.completion_mask.float())


def test_group_masking_keeps_the_informative_groups_rows_of_per_token_advantages() -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    batch.rewards[:] = [[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]  # the second group is degenerate
    advantages = torch.arange(6 * 4, dtype=torch.float32).view(6, 4)  # [B, T]
    trained, kept = mask_degenerate(batch, advantages)
    assert trained.num_groups == 1 and torch.equal(kept, advantages[:3])


def test_the_trl_engine_and_adapter_refuse_it_in_one_line() -> None:
    from grpolab.integrations.trl import resolve_advantage
    from grpolab.train.trl_engine.arguments import check_supported

    with pytest.raises(UserError, match=rf"advantage '{NAME}' gives each token its own advantage.*--engine grpolab"):
        check_supported(TrainConfig(engine="trl", advantage=NAME))
    with pytest.raises(ValueError, match="TRL's GRPOTrainer takes one advantage per completion"):
        resolve_advantage(NAME)


def test_the_verl_adapter_leaves_it_to_verl() -> None:
    from grpolab.integrations.verl.estimators import adaptable, make_adv_estimator

    assert NAME not in adaptable() and "opo" in adaptable()
    with pytest.raises(UserError, match=rf"set algorithm.adv_estimator={NAME}"):
        make_adv_estimator(NAME)


def test_grpolab_gradients_measures_its_per_token_advantages(capsys: pytest.CaptureFixture[str]) -> None:
    """``grpolab gradients --advantage optimal_token_baseline`` computes the statistics itself (it was refused), and
    its advantages vary within a completion, where an outcome estimator's do not."""
    import json

    from grpolab.cli import main

    assert main(["gradients", "--advantage", NAME, "--prompts", "4", "--threads", "1", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    assert metrics["grad/token_advantage_within_completion_std"] > 0
    assert metrics["grad/row_sum_error"] < 1e-4
