"""Tests for ``grpolab.losses``: the clipped surrogate on hand-computed values, the loss options (GSPO's sequence
ratio, CISPO, the dual clip, truncated importance sampling) with their equivalences, aggregation, micro-batches.

Shapes: logprobs, loss and mask are [B, T] (B completions, T tokens); advantages [B] or [B, T].
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.losses import (
    AGGREGATION_MODES,
    LossOptions,
    PolicyLossTerms,
    aggregate,
    aggregation_denominator,
    entropy_bonus,
    importance_log_ratio,
    off_policy_mask,
    policy_loss,
    rows_with_gradient,
    truncated_is_weights,
    vespo_weights,
)

pytestmark = pytest.mark.fast

SETTINGS = settings(max_examples=20, deadline=None, database=None)
F64 = torch.float64

# Token ratios pi / pi_old used in the tables: inside the range, above it, below it.
RATIOS = [1.1, 1.5, 0.5]
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -3.0]], dtype=F64)  # [B, T]
LOGPROBS = OLD + torch.log(torch.tensor([RATIOS, RATIOS], dtype=F64))  # [B, T]
ADVANTAGES = torch.tensor([2.0, -1.0], dtype=F64)  # [B]: one positive, one negative completion


def test_policy_loss_asymmetric_clip_hand_table() -> None:
    # Clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]; loss = max(-A r, -A clip(r)).
    # A = +2: r 1.1 -> max(-2.2, -2.2)  = -2.2 (inside, not clipped)
    #         r 1.5 -> max(-3.0, -2.56) = -2.56 (clipped at 1 + eps_high)
    #         r 0.5 -> max(-1.0, -1.6)  = -1.0 (below the range, but A > 0: unclipped branch)
    # A = -1: r 1.1 -> max(1.1, 1.1)    = 1.1 (inside)
    #         r 1.5 -> max(1.5, 1.28)   = 1.5 (above the range, but A < 0: unclipped branch)
    #         r 0.5 -> max(0.5, 0.8)    = 0.8 (clipped at 1 - eps_low)
    terms = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(epsilon_low=0.2, epsilon_high=0.28))
    assert isinstance(terms, PolicyLossTerms)
    expected = torch.tensor([[-2.2, -2.56, -1.0], [1.1, 1.5, 0.8]], dtype=F64)
    torch.testing.assert_close(terms.loss, expected)
    torch.testing.assert_close(terms.clipped, torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=F64))
    torch.testing.assert_close(terms.kl, torch.zeros_like(expected))


def test_policy_loss_symmetric_clip_hand_table() -> None:
    # epsilon_high=None -> [0.8, 1.2]. A = +2, r 1.5 -> max(-3.0, -2.4) = -2.4; A = -1, r 0.5 -> 0.8.
    # Small clip 0.05 -> [0.95, 1.05]: A = +2, r 1.1 -> -2.1 (clipped); A = -1, r 1.1 -> 1.1 (not clipped).
    terms = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions())
    torch.testing.assert_close(terms.loss, torch.tensor([[-2.2, -2.4, -1.0], [1.1, 1.5, 0.8]], dtype=F64))
    narrow = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(epsilon_low=0.05))
    torch.testing.assert_close(narrow.loss, torch.tensor([[-2.1, -2.1, -1.0], [1.1, 1.5, 0.95]], dtype=F64))
    torch.testing.assert_close(narrow.clipped, torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=F64))


def test_policy_loss_at_ratio_one_is_minus_advantage() -> None:
    terms = policy_loss(OLD.clone(), OLD, ADVANTAGES, LossOptions())
    torch.testing.assert_close(terms.loss, -ADVANTAGES[:, None].expand(2, 3))
    assert (terms.clipped == 0).all()


def test_per_token_advantages_equal_broadcast_per_completion_advantages() -> None:
    per_token = ADVANTAGES[:, None].expand(2, 3)  # [B, T]
    a = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(epsilon_high=0.28))
    b = policy_loss(LOGPROBS, OLD, per_token, LossOptions(epsilon_high=0.28))
    torch.testing.assert_close(a.loss, b.loss)
    torch.testing.assert_close(a.clipped, b.clipped)


@SETTINGS
@given(
    log_ratio=st.floats(-2.0, 2.0),
    # no subnormal advantages: r A and clip(r) A round to the same subnormal (e.g. A = -5e-324), and which of the
    # two "was clipped" is then not a property of the loss but of the rounding
    advantage=st.floats(-3.0, 3.0, allow_subnormal=False),
    eps_low=st.floats(0.0, 0.5),
    eps_high=st.floats(0.0, 0.5),
)
def test_policy_loss_equals_ppo_formula(
    log_ratio: float, advantage: float, eps_low: float, eps_high: float
) -> None:
    # PPO: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A); TRL's clipped indicator.
    ratio = math.exp(log_ratio)
    expected = -min(ratio * advantage, min(max(ratio, 1 - eps_low), 1 + eps_high) * advantage)
    is_clipped = (ratio > 1 + eps_high and advantage > 0) or (ratio < 1 - eps_low and advantage < 0)
    old = torch.tensor([[-1.0]], dtype=F64)
    options = LossOptions(epsilon_low=eps_low, epsilon_high=eps_high)
    terms = policy_loss(old + log_ratio, old, torch.tensor([advantage], dtype=F64), options)
    assert terms.loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert terms.clipped.item() == float(is_clipped)


def test_kl_k3_hand_values() -> None:
    # k3 = exp(ref - logp) - (ref - logp) - 1.
    # ref - logp = 0.5 -> e^0.5 - 1.5 = 0.14872127...; ref - logp = -1 -> e^-1 + 1 - 1 = 0.36787944...;
    # ref - logp = 0 -> 0.
    logprobs = torch.tensor([[-1.0, -1.0, -2.0]], dtype=F64)
    ref = torch.tensor([[-0.5, -2.0, -2.0]], dtype=F64)
    advantage = torch.tensor([1.0], dtype=F64)
    terms = policy_loss(logprobs, logprobs.detach(), advantage, LossOptions(beta=0.1), ref_logprobs=ref)
    expected_kl = torch.tensor([[math.exp(0.5) - 1.5, math.exp(-1.0), 0.0]], dtype=F64)
    torch.testing.assert_close(terms.kl, expected_kl)
    torch.testing.assert_close(
        terms.kl[0, :2], torch.tensor([0.14872127070012819, 0.36787944117144233], dtype=F64)
    )
    # ratio 1, A = 1: surrogate -1 per token, plus beta * kl.
    torch.testing.assert_close(terms.loss, -1.0 + 0.1 * expected_kl)


@SETTINGS
@given(log_ratio=st.floats(-5.0, 5.0))
def test_kl_nonnegative_and_zero_at_equal_policies(log_ratio: float) -> None:
    logprobs = torch.tensor([[-1.0, -1.0]], dtype=F64)
    ref = logprobs + torch.tensor([[log_ratio, 0.0]], dtype=F64)
    kl = policy_loss(logprobs, logprobs, torch.tensor([1.0], dtype=F64), LossOptions(beta=1.0), ref_logprobs=ref).kl
    assert kl[0, 0] >= 0
    assert kl[0, 1] == 0


def test_beta_without_reference_rejected() -> None:
    with pytest.raises(ValueError, match="beta > 0 needs ref_logprobs"):
        policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(beta=0.04))


def test_beta_zero_ignores_reference() -> None:
    terms = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(), ref_logprobs=OLD - 1.0)
    torch.testing.assert_close(terms.loss, policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions()).loss)
    assert (terms.kl == 0).all()


def test_gradient_flows_and_clipped_tokens_get_none() -> None:
    # token_mean over 6 tokens: d loss / d logp = -A r / 6 on unclipped-branch tokens, 0 on clipped ones.
    logprobs = LOGPROBS.clone().requires_grad_(True)
    ref = OLD - 0.1
    terms = policy_loss(logprobs, OLD, ADVANTAGES, LossOptions(epsilon_high=0.28))
    aggregate(terms.loss, torch.ones(2, 3)).backward()
    grad = logprobs.grad
    assert grad is not None and torch.isfinite(grad).all()
    ratio = torch.tensor([RATIOS, RATIOS], dtype=F64)
    expected = (-ADVANTAGES[:, None] * ratio / 6) * (1 - terms.clipped)
    torch.testing.assert_close(grad, expected)
    # with a KL term every token gets a gradient, and all are finite
    logprobs.grad = None
    terms = policy_loss(logprobs, OLD, ADVANTAGES, LossOptions(beta=0.5), ref_logprobs=ref)
    for mode in AGGREGATION_MODES:
        logprobs.grad = None
        aggregate(terms.loss, torch.tensor([[1, 1, 0], [1, 0, 0]]), mode).backward(retain_graph=True)
        assert torch.isfinite(logprobs.grad).all() and logprobs.grad.abs().sum() > 0


def test_clipped_indicator_splits_into_low_and_high_bounds() -> None:
    # The hand table above: A = +2, r 1.5 is clipped by the upper bound; A = -1, r 0.5 by the lower one.
    terms = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(epsilon_low=0.2, epsilon_high=0.28))
    torch.testing.assert_close(terms.clipped_high, torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64))
    torch.testing.assert_close(terms.clipped_low, torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=F64))
    torch.testing.assert_close(terms.clipped, terms.clipped_low + terms.clipped_high)
    assert (terms.clipped_dual == 0).all()


def _grad(options: dict, logprobs: torch.Tensor, old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
          mode: str = "token_mean", **tensors: torch.Tensor) -> tuple[PolicyLossTerms, torch.Tensor]:
    """The terms of ``policy_loss`` under ``LossOptions(**options)`` (and its tensor arguments ``tensors``) and
    d aggregate / d logprobs [B, T]."""
    leaf = logprobs.clone().requires_grad_(True)
    terms = policy_loss(leaf, old, advantages, LossOptions(**options), mask=mask, **tensors)
    aggregate(terms.loss, mask, mode).backward()
    return terms, leaf.grad


# ---------------------------------------------------------------------------- GSPO (sequence-level ratio)

SEQ_OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -3.0]], dtype=F64)  # [B, T]
SEQ_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)  # row 1's last token is padding
# token log-ratios: row 0 [0.3, -0.1, 0.1] (mean 0.1); row 1 [0.5, 0.1] (mean 0.3), its padding 7.0 ignored
SEQ_LOGPROBS = SEQ_OLD + torch.tensor([[0.3, -0.1, 0.1], [0.5, 0.1, 7.0]], dtype=F64)


def test_sequence_ratio_is_exp_of_the_masked_mean_log_ratio_on_every_token() -> None:
    log_ratio = importance_log_ratio(SEQ_LOGPROBS, SEQ_OLD, level="sequence", mask=SEQ_MASK)
    torch.testing.assert_close(log_ratio, torch.tensor([[0.1] * 3, [0.3] * 3], dtype=F64))
    torch.testing.assert_close(importance_log_ratio(SEQ_LOGPROBS, SEQ_OLD), SEQ_LOGPROBS - SEQ_OLD)


def test_gspo_hand_computed_loss_and_gradient() -> None:
    # s_0 = e^0.1 = 1.10517, s_1 = e^0.3 = 1.34986; A = [+1, -1]; clip [0.8, 1.2].
    # Row 0: A > 0, s_0 inside the range -> loss -s_0 on each token. Row 1: A < 0, s_1 > 1.2 -> the unclipped
    # branch max(s_1, 1.2) = s_1. token_mean over the 5 tokens: d loss / d logp_t = -A_i s_i / 5 (GSPO-token).
    s0, s1 = math.exp(0.1), math.exp(0.3)
    advantages = torch.tensor([1.0, -1.0], dtype=F64)
    terms, grad = _grad({"importance_sampling_level": "sequence"}, SEQ_LOGPROBS, SEQ_OLD, advantages, SEQ_MASK)
    torch.testing.assert_close(terms.loss, torch.tensor([[-s0] * 3, [s1] * 3], dtype=F64))
    assert (terms.clipped == 0).all()
    torch.testing.assert_close(grad, torch.tensor([[-s0 / 5] * 3, [s1 / 5, s1 / 5, 0.0]], dtype=F64))
    # GSPO's own objective, the mean over sequences: its gradient is s_i A_i / |y_i| / B on each token.
    _, grad = _grad({"importance_sampling_level": "sequence"}, SEQ_LOGPROBS, SEQ_OLD, advantages, SEQ_MASK,
                    "seq_mean_token_mean")
    torch.testing.assert_close(grad, torch.tensor([[-s0 / 6] * 3, [s1 / 4, s1 / 4, 0.0]], dtype=F64))


def test_gspo_clips_whole_sequences() -> None:
    # Both rows A = +1: row 1's s_1 = 1.35 > 1.2 is clipped on every token (loss -1.2, no gradient); row 0 is not.
    advantages = torch.tensor([1.0, 1.0], dtype=F64)
    terms, grad = _grad({"importance_sampling_level": "sequence"}, SEQ_LOGPROBS, SEQ_OLD, advantages, SEQ_MASK)
    torch.testing.assert_close(terms.loss[1], torch.full((3,), -1.2, dtype=F64))
    torch.testing.assert_close(terms.clipped_high, torch.tensor([[0.0] * 3, [1.0] * 3], dtype=F64))
    assert (grad[1] == 0).all() and (grad[0] != 0).all()


def test_gspo_gradient_equals_the_gradient_of_the_sequence_ratio_itself() -> None:
    # Under a per-completion advantage, GSPO-token's gradient equals differentiating exp(mean_t log r) directly.
    generator = torch.Generator().manual_seed(3)
    old = -torch.rand(4, 6, generator=generator, dtype=F64) * 3  # [B, T]
    logprobs = old + 0.1 * torch.randn(4, 6, generator=generator, dtype=F64)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4, [1] * 5 + [0]], dtype=F64)
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.0], dtype=F64)
    for mode in AGGREGATION_MODES:
        _, grad = _grad({"importance_sampling_level": "sequence", "epsilon_low": 10.0}, logprobs, old, advantages,
                        mask, mode)
        leaf = logprobs.clone().requires_grad_(True)
        sequence = torch.exp(((leaf - old) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True))  # [B, 1]
        aggregate((-advantages[:, None] * sequence).expand(4, 6), mask, mode).backward()
        torch.testing.assert_close(grad, leaf.grad)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), objective=st.sampled_from(["clip", "cispo"]))
def test_gspo_on_one_token_sequences_equals_the_token_ratio(seed: int, objective: str) -> None:
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(5, 1, generator=generator, dtype=F64) * 3  # [B, 1]: one token per sequence
    logprobs = old + 0.5 * torch.randn(5, 1, generator=generator, dtype=F64)
    advantages = torch.randn(5, generator=generator, dtype=F64)
    mask = torch.ones(5, 1, dtype=F64)
    options = {"objective": objective, "epsilon_high": 0.28, "cispo_ratio_max": 1.3}
    token, token_grad = _grad(options, logprobs, old, advantages, mask)
    sequence, sequence_grad = _grad({**options, "importance_sampling_level": "sequence"}, logprobs, old,
                                    advantages, mask)
    torch.testing.assert_close(sequence.loss, token.loss)
    torch.testing.assert_close(sequence.clipped, token.clipped)
    torch.testing.assert_close(sequence_grad, token_grad)


def test_sequence_level_without_a_mask_is_refused() -> None:
    with pytest.raises(ValueError, match="needs the completion mask"):
        policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(importance_sampling_level="sequence"))
    with pytest.raises(ValueError, match="unknown importance_sampling_level 'seq'"):
        importance_log_ratio(LOGPROBS, OLD, level="seq")


# ---------------------------------------------------------------------------- CISPO

ONES = torch.ones(2, 3, dtype=F64)


def test_cispo_hand_computed_loss_and_gradient() -> None:
    # Ratios [1.1, 1.5, 0.5] per row; r_max 1.28, no lower bound -> weights [1.1, 1.28, 0.5].
    # loss = -A w logp; d loss / d logp = -A w / 6 (token_mean over 6 tokens), on every token: none loses it.
    weights = torch.tensor([[1.1, 1.28, 0.5]] * 2, dtype=F64)
    terms, grad = _grad({"objective": "cispo", "cispo_ratio_max": 1.28}, LOGPROBS, OLD, ADVANTAGES, ONES)
    torch.testing.assert_close(terms.loss, -ADVANTAGES[:, None] * weights * LOGPROBS)
    torch.testing.assert_close(grad, -ADVANTAGES[:, None] * weights / 6)
    torch.testing.assert_close(terms.clipped_high, torch.tensor([[0.0, 1.0, 0.0]] * 2, dtype=F64))  # both signs
    assert (terms.clipped_low == 0).all()
    # with a lower bound 0.8 the 0.5 ratio's weight becomes 0.8
    terms, grad = _grad({"objective": "cispo", "cispo_ratio_min": 0.8, "cispo_ratio_max": 1.28}, LOGPROBS, OLD,
                        ADVANTAGES, ONES)
    torch.testing.assert_close(grad, -ADVANTAGES[:, None] * torch.tensor([[1.1, 1.28, 0.8]] * 2, dtype=F64) / 6)
    torch.testing.assert_close(terms.clipped_low, torch.tensor([[0.0, 0.0, 1.0]] * 2, dtype=F64))


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_cispo_without_clipping_has_the_plain_policy_gradient(seed: int) -> None:
    # Unclipped CISPO, -sg(r) A log pi, and the unclipped surrogate -r A have the same gradient -A r.
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 4, generator=generator, dtype=F64) * 3  # [B, T]
    logprobs = old + torch.randn(3, 4, generator=generator, dtype=F64)
    advantages = torch.randn(3, generator=generator, dtype=F64)
    mask = torch.ones(3, 4, dtype=F64)
    _, cispo = _grad({"objective": "cispo", "cispo_ratio_max": math.inf}, logprobs, old, advantages, mask)
    _, plain = _grad({"epsilon_low": 1.0, "epsilon_high": math.inf}, logprobs, old, advantages, mask)
    torch.testing.assert_close(cispo, plain)
    torch.testing.assert_close(plain, -advantages[:, None] * torch.exp(logprobs - old) / 12)


def test_cispo_refuses_the_dual_clip() -> None:
    with pytest.raises(ValueError, match="dual clip applies to the clipped objective"):
        policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(objective="cispo", dual_clip_c=3.0))
    with pytest.raises(ValueError, match="unknown objective 'ppo'"):
        policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(objective="ppo"))


# ---------------------------------------------------------------------------- TRL 1.16's SAPO, LUSPO and VESPO


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_sapo_hand_computed_loss_and_gradient() -> None:
    # Ratios [1.1, 1.5, 0.5]; row 0 (A = 2 > 0) gets tau_pos 1.0, row 1 (A = -1) tau_neg 1.05.
    # loss = -A sigmoid(tau (r - 1)) 4 / tau; d loss / d logp = -A 4 s (1 - s) r, / 6 under token_mean.
    taus = [1.0, 1.05]
    gate = [[_sigmoid(tau * (r - 1)) for r in RATIOS] for tau in taus]
    loss = [[-a * g * 4 / tau for g in row] for a, tau, row in zip([2.0, -1.0], taus, gate, strict=True)]
    grad = [[-a * 4 * g * (1 - g) * r / 6 for g, r in zip(row, RATIOS, strict=True)]
            for a, row in zip([2.0, -1.0], gate, strict=True)]
    temperatures = {"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05}
    terms, got = _grad({"objective": "sapo", **temperatures}, LOGPROBS, OLD, ADVANTAGES, ONES)
    # float64 throughout: was tau 1.05 rounded through float32 (1.04999995), 0.35 of the default tolerance off
    torch.testing.assert_close(terms.loss, torch.tensor(loss, dtype=F64), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(got, torch.tensor(grad, dtype=F64), atol=1e-12, rtol=1e-12)
    assert terms.loss[0, 0].item() == pytest.approx(-8 * 0.52497918747894)  # sigmoid(0.1), tau 1
    # on-policy (r = 1) the gate's gradient is the policy gradient's: -A per token
    _, on_policy = _grad({"objective": "sapo"}, OLD, OLD, ADVANTAGES, ONES)
    torch.testing.assert_close(on_policy, -ADVANTAGES[:, None].expand(2, 3) / 6)


def test_luspo_is_the_clipped_loss_times_the_length_and_trls_sum_over_sequences() -> None:
    # Rows of 3 and 2 loss tokens: luspo = clip loss * [3, 2]; aggregated as seq_mean_token_mean it is TRL's
    # mean_b sum_t clip loss, i.e. the clipped loss aggregated as seq_mean_token_sum.
    options = {"epsilon_high": 0.28, "importance_sampling_level": "sequence"}
    clip = policy_loss(SEQ_LOGPROBS, SEQ_OLD, ADVANTAGES, LossOptions(**options), mask=SEQ_MASK)
    luspo = policy_loss(SEQ_LOGPROBS, SEQ_OLD, ADVANTAGES, LossOptions(objective="luspo", **options), mask=SEQ_MASK)
    torch.testing.assert_close(luspo.loss, clip.loss * torch.tensor([[3.0], [2.0]], dtype=F64))
    # sequence ratios e^0.1 (row 0, A = 2, inside 1.28) and e^0.3 = 1.35 (row 1, A = -1, unclipped above)
    expected = (3 * -2 * math.exp(0.1) + 2 * math.exp(0.3)) / 2
    assert aggregate(luspo.loss, SEQ_MASK, "seq_mean_token_mean").item() == pytest.approx(expected)
    assert aggregate(clip.loss, SEQ_MASK, "seq_mean_token_sum").item() == pytest.approx(expected)
    torch.testing.assert_close(luspo.clipped, clip.clipped)


def test_vespo_hand_computed_weights_loss_and_gradient() -> None:
    # Row 1's last token is padding: w = 1.1 * 1.5 * 0.5 = 0.825 (row 0), 1.1 * 1.5 = 1.65 (row 1).
    # phi(w) = exp(lam + k ln w - lam w): row 0 (A = 2) k 2, lam 3; row 1 (A = -1) k 3, lam 2.
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    logprobs = OLD + torch.log(torch.tensor([RATIOS, [1.1, 1.5, 9.0]], dtype=F64))
    phi = [math.exp(3 + 2 * math.log(0.825) - 3 * 0.825), math.exp(2 + 3 * math.log(1.65) - 2 * 1.65)]
    assert phi[0] == pytest.approx(1.1506, abs=1e-4) and phi[1] == pytest.approx(1.2242, abs=1e-4)
    got = vespo_weights(logprobs, OLD, ADVANTAGES[:, None], mask, 2.0, 3.0, 3.0, 2.0)
    torch.testing.assert_close(got, torch.tensor([[phi[0]], [phi[1]]], dtype=F64))
    terms, grad = _grad({"objective": "vespo"}, logprobs, OLD, ADVANTAGES, mask)
    weight = torch.tensor([[2.0 * phi[0]], [-1.0 * phi[1]]], dtype=F64)  # A phi
    torch.testing.assert_close(terms.loss, -weight * logprobs)
    torch.testing.assert_close(grad, -weight * mask / 5)  # token_mean over 5 tokens; phi carries no gradient
    assert vespo_weights(OLD, OLD, ADVANTAGES[:, None], mask, 2.0, 3.0, 3.0, 2.0).eq(1.0).all()  # phi(1) = 1


def test_vespo_folds_the_tis_weights_into_w_instead_of_multiplying() -> None:
    is_weights = torch.tensor([[2.0, 1.0, 1.0], [0.5, 1.0, 1.0]], dtype=F64)  # w x 2 (row 0), x 0.5 (row 1)
    with_is = policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(objective="vespo"), mask=ONES, is_weights=is_weights)
    w = torch.tensor([[0.825 * 2], [0.825 * 0.5]], dtype=F64)
    k, lam = torch.tensor([[2.0], [3.0]], dtype=F64), torch.tensor([[3.0], [2.0]], dtype=F64)
    phi = torch.exp(lam + k * torch.log(w) - lam * w)
    torch.testing.assert_close(with_is.loss, -phi * ADVANTAGES[:, None] * LOGPROBS)


def test_vespo_weights_match_trls_gamma_weights() -> None:
    trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=generator, dtype=F64) * 3
    logprobs = old + torch.randn(4, 5, generator=generator, dtype=F64) * 0.3
    advantages = torch.tensor([[1.0], [-1.0], [0.0], [-0.5]], dtype=F64)
    mask = (torch.rand(4, 5, generator=generator) > 0.2).to(F64)
    shape = {"k_pos": 1.5, "lambda_pos": 2.5, "k_neg": 3.5, "lambda_neg": 1.5}
    theirs = trainer.GRPOTrainer.get_gamma_weights(advantages, logprobs - old, mask, None, **shape)
    torch.testing.assert_close(vespo_weights(logprobs, old, advantages, mask, *shape.values()), theirs)


@pytest.mark.parametrize("objective", ["sapo", "vespo"])
def test_the_soft_objectives_refuse_the_dual_clip(objective: str) -> None:
    with pytest.raises(ValueError, match=f"not to {objective}"):
        policy_loss(LOGPROBS, OLD, ADVANTAGES, LossOptions(objective=objective, dual_clip_c=3.0), mask=ONES)


# ---------------------------------------------------------------------------- off-policy sequence masking


def test_off_policy_mask_hand_computed() -> None:
    # Mean per-token log pi_sampler - log pi over the mask: row 0 1.0 (but A > 0: kept), row 1 0.5 > 0.3 (A < 0:
    # dropped), row 2 (0.2 + 0.0) / 2 = 0.1 <= 0.3 (kept; its padding's 9.0 does not count).
    logprobs = torch.zeros(3, 3, dtype=F64)
    sampling = torch.tensor([[1.0, 1.0, 1.0], [0.5, 0.5, 0.5], [0.2, 0.0, 9.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    advantages = torch.tensor([[2.0], [-1.0], [-1.0]], dtype=F64)
    keep = off_policy_mask(advantages, logprobs, sampling, mask, 0.3)
    torch.testing.assert_close(keep, torch.tensor([[1.0], [0.0], [1.0]], dtype=F64))
    options = LossOptions(off_policy_mask_threshold=0.3)
    terms = policy_loss(logprobs, logprobs, advantages[:, 0], options, mask=mask, sampling_logprobs=sampling)
    torch.testing.assert_close(terms.loss, -advantages * keep * torch.ones(3, 3, dtype=F64))  # ratio 1
    torch.testing.assert_close(terms.off_policy_masked, torch.tensor([[0.0] * 3, [1.0] * 3, [0.0] * 3], dtype=F64))
    # without the sampler's log-probs the KL is against old_logprobs: on-policy it is 0 and nothing is dropped
    on_policy = policy_loss(logprobs, logprobs, advantages[:, 0], LossOptions(off_policy_mask_threshold=0.3), mask=mask)
    assert on_policy.off_policy_masked.sum() == 0


def test_off_policy_mask_matches_trls() -> None:
    trainer = pytest.importorskip("trl.trainer.grpo_trainer")
    generator = torch.Generator().manual_seed(1)
    logprobs = -torch.rand(6, 4, generator=generator, dtype=F64) * 2
    sampling = logprobs + torch.randn(6, 4, generator=generator, dtype=F64) * 0.5
    mask = (torch.rand(6, 4, generator=generator) > 0.25).to(F64)
    advantages = torch.tensor([[1.0], [-1.0], [-0.5], [0.0], [-2.0], [-1.0]], dtype=F64)
    theirs = trainer.GRPOTrainer.get_off_policy_mask(advantages, logprobs, sampling, mask, 0.1)
    ours = off_policy_mask(advantages, logprobs, sampling, mask, 0.1)
    torch.testing.assert_close(ours, theirs)
    assert 0 < ours.sum() < 6  # some kept, some dropped


# ---------------------------------------------------------------------------- entropy bonus


def test_entropy_bonus_is_coef_times_the_entropy_aggregated_like_the_loss() -> None:
    entropy = torch.tensor([[1.0, 2.0, 4.0], [3.0, 5.0, 7.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    assert entropy_bonus(entropy, mask, "token_mean", 0.1).item() == pytest.approx(0.1 * 15 / 5)
    assert entropy_bonus(entropy, mask, "seq_mean_token_mean", 0.1).item() == pytest.approx(0.1 * (7 / 3 + 4) / 2)
    assert entropy_bonus(entropy, mask, "token_mean", 0.1, denominator=10.0).item() == pytest.approx(0.15)


def test_the_entropy_bonus_gives_every_row_with_a_loss_token_a_gradient() -> None:
    advantages = torch.tensor([1.0, 0.0, 0.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    assert rows_with_gradient(advantages, mask).tolist() == [True, False, False]
    assert rows_with_gradient(advantages, mask, entropy_coef=0.01).tolist() == [True, True, False]


# ---------------------------------------------------------------------------- dual clip

def test_dual_clip_hand_computed_loss_and_gradient() -> None:
    # Row 1 (A = -1) ratios [1.1, 1.5, 4.0], c = 3: PPO's loss [1.1, 1.5, 4.0], capped at -A c = 3 on the last
    # token, which then has no gradient. Row 0 (A = +2) is untouched.
    old = torch.zeros(2, 3, dtype=F64)
    logprobs = torch.log(torch.tensor([[1.1, 1.5, 0.5], [1.1, 1.5, 4.0]], dtype=F64))
    terms, grad = _grad({"dual_clip_c": 3.0}, logprobs, old, ADVANTAGES, ONES)
    plain, plain_grad = _grad({}, logprobs, old, ADVANTAGES, ONES)
    torch.testing.assert_close(terms.loss[1], torch.tensor([1.1, 1.5, 3.0], dtype=F64))
    torch.testing.assert_close(terms.clipped_dual, torch.tensor([[0.0] * 3, [0.0, 0.0, 1.0]], dtype=F64))
    torch.testing.assert_close(grad[1], torch.tensor([1.1 / 6, 1.5 / 6, 0.0], dtype=F64))
    torch.testing.assert_close(terms.loss[0], plain.loss[0])
    torch.testing.assert_close(grad[0], plain_grad[0])
    torch.testing.assert_close(plain_grad[1, 2], torch.tensor(4.0 / 6, dtype=F64))  # what the cap took away


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_dual_clip_at_infinity_is_no_dual_clip(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 4, generator=generator, dtype=F64) * 3  # [B, T]
    logprobs = old + torch.randn(3, 4, generator=generator, dtype=F64)
    advantages = torch.tensor([1.0, 0.0, -1.5], dtype=F64)
    mask = torch.ones(3, 4, dtype=F64)
    dual, dual_grad = _grad({"dual_clip_c": math.inf}, logprobs, old, advantages, mask)
    plain, plain_grad = _grad({}, logprobs, old, advantages, mask)
    torch.testing.assert_close(dual.loss, plain.loss)
    torch.testing.assert_close(dual_grad, plain_grad)
    assert (dual.clipped_dual == 0).all()


# ---------------------------------------------------------------------------- truncated importance sampling

def test_truncated_is_weights_hand_values() -> None:
    trainer = torch.tensor([[-1.0, -2.0, -0.5]], dtype=F64)
    sampler = trainer - torch.log(torch.tensor([[2.0, 0.5, 1.0]], dtype=F64))  # pi_trainer / pi_sampler = 2, .5, 1
    torch.testing.assert_close(truncated_is_weights(trainer, sampler, 1.5),
                               torch.tensor([[1.5, 0.5, 1.0]], dtype=torch.float32))
    leaf = trainer.clone().requires_grad_(True)
    assert not truncated_is_weights(leaf, sampler, 1.5).requires_grad


def test_is_weights_scale_the_policy_term_not_the_kl() -> None:
    weights = torch.tensor([[1.5, 0.5, 1.0], [2.0, 1.0, 0.25]], dtype=F64)
    ref = OLD - 0.2
    terms, _ = _grad({"beta": 0.1}, LOGPROBS, OLD, ADVANTAGES, ONES, is_weights=weights, ref_logprobs=ref)
    plain, _ = _grad({"beta": 0.1}, LOGPROBS, OLD, ADVANTAGES, ONES, ref_logprobs=ref)
    policy_term = plain.loss - 0.1 * plain.kl
    torch.testing.assert_close(terms.loss, weights * policy_term + 0.1 * plain.kl)
    _, unweighted = _grad({}, LOGPROBS, OLD, ADVANTAGES, ONES)
    _, weighted = _grad({}, LOGPROBS, OLD, ADVANTAGES, ONES, is_weights=weights)
    torch.testing.assert_close(weighted, weights * unweighted)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1))
def test_tis_with_an_infinite_cap_and_matching_sampler_is_no_correction(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    old = -torch.rand(3, 4, generator=generator, dtype=F64) * 3  # [B, T]
    logprobs = old + 0.3 * torch.randn(3, 4, generator=generator, dtype=F64)
    advantages = torch.randn(3, generator=generator, dtype=F64)
    mask = torch.ones(3, 4, dtype=F64)
    weights = truncated_is_weights(old, old.clone(), math.inf)
    assert (weights == 1).all()
    corrected, corrected_grad = _grad({}, logprobs, old, advantages, mask, is_weights=weights.to(F64))
    plain, plain_grad = _grad({}, logprobs, old, advantages, mask)
    torch.testing.assert_close(corrected.loss, plain.loss)
    torch.testing.assert_close(corrected_grad, plain_grad)


# ---------------------------------------------------------------------------- aggregation

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        # (1 + 2 + 4) / 3 tokens
        ("token_mean", {}, 7 / 3),
        # mean of the sequence means (1 + 2) / 2 = 1.5 and 4 / 1 = 4 -> 2.75
        ("seq_mean_token_mean", {}, 2.75),
        # (1 + 2 + 4) / (B * T) = 7 / 6; with max_length 5: 7 / 10
        ("seq_mean_token_sum_norm", {}, 7 / 6),
        ("seq_mean_token_sum_norm", {"max_length": 5}, 7 / 10),
        # mean of the sequence sums 3 and 4 -> 3.5
        ("seq_mean_token_sum", {}, 3.5),
    ],
)
def test_aggregate_hand_computed_2x3(mode: str, kwargs: dict, expected: float) -> None:
    assert aggregate(LOSS, MASK, mode, **kwargs).item() == pytest.approx(expected, rel=1e-12)
    assert aggregate(LOSS, MASK.bool(), mode, **kwargs).item() == pytest.approx(expected, rel=1e-12)


def test_aggregation_denominators_hand_computed() -> None:
    assert aggregation_denominator(MASK, "token_mean") == 3.0
    assert aggregation_denominator(MASK, "seq_mean_token_mean") == 2.0
    assert aggregation_denominator(MASK, "seq_mean_token_sum") == 2.0
    assert aggregation_denominator(MASK, "seq_mean_token_sum_norm") == 6.0
    assert aggregation_denominator(MASK, "seq_mean_token_sum_norm", max_length=5) == 10.0


def test_default_mode_is_token_mean() -> None:
    assert aggregate(LOSS, MASK).item() == pytest.approx(7 / 3)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_empty_mask_gives_zero_not_nan(mode: str) -> None:
    assert aggregate(LOSS, torch.zeros(2, 3), mode).item() == 0.0


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_masked_tokens_do_not_matter(mode: str) -> None:
    changed = LOSS.clone()
    changed[MASK == 0] = 1e6
    assert aggregate(changed, MASK, mode).item() == pytest.approx(aggregate(LOSS, MASK, mode).item())


@SETTINGS
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.integers(1, 8),
    cuts=st.lists(st.integers(1, 7), max_size=3),
    max_length=st.sampled_from([None, 12]),
)
def test_micro_batch_sum_equals_full_batch(
    mode: str, seed: int, batch: int, cuts: list[int], max_length: int | None
) -> None:
    generator = torch.Generator().manual_seed(seed)
    loss = torch.randn(batch, 5, generator=generator, dtype=F64)  # [B, T]
    mask = (torch.rand(batch, 5, generator=generator) < 0.6).to(torch.int64)  # [B, T], some rows empty
    full = aggregate(loss, mask, mode, max_length=max_length)
    denominator = aggregation_denominator(mask, mode, max_length=max_length)
    bounds = [0, *sorted({c for c in cuts if c < batch}), batch]
    parts = [
        aggregate(loss[lo:hi], mask[lo:hi], mode, denominator=denominator)
        for lo, hi in itertools.pairwise(bounds)
    ]
    torch.testing.assert_close(sum(parts), full)


@pytest.mark.parametrize("call", [aggregate, aggregation_denominator])
def test_unknown_mode_rejected_with_list_of_modes(call) -> None:
    args = (LOSS, MASK, "seq-mean-token-mean") if call is aggregate else (MASK, "seq-mean-token-mean")
    with pytest.raises(ValueError, match="unknown loss aggregation mode 'seq-mean-token-mean'") as error:
        call(*args)
    assert all(mode in str(error.value) for mode in AGGREGATION_MODES)
