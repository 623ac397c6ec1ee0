"""``target_logprobs`` against the plain ``log_softmax(logits / t).gather(target)`` it replaces in the update.

Tolerances, derived: the two differ only in how the float32 logsumexp over V terms is summed, whose error is at
most about V x eps(float32) x max|logit / t| (worst case; measured ~1e-6 at V = 1000). In bfloat16 both cast the
same float32 gradient to bfloat16 at the same point: within one bfloat16 rounding (2^-8 relative) of each other.
"""

from __future__ import annotations

import math

import pytest
import torch
from tests.float_bounds import reordered_sum_gap

from grpolab.engine.target_logprobs import entropy, target_logprobs

pytestmark = pytest.mark.fast

ROWS, VOCAB = 37, 1000  # 37 rows in chunks of 8: a remainder chunk


def _plain(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, targets[:, None]).squeeze(1)


def _case(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(ROWS, VOCAB, generator=generator) * 3).to(dtype)
    targets = torch.randint(0, VOCAB, (ROWS,), generator=generator)
    weights = torch.randn(ROWS, generator=generator)  # a loss that weighs each row's log-prob differently
    return logits, targets, weights


def _value_and_grad(fn, logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor, temperature: float):
    leaf = logits.clone().requires_grad_(True)
    value = fn(leaf, targets, temperature)
    (value * weights).sum().backward()
    return value.detach(), leaf.grad


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_rows", [8, None])
def test_values_and_gradients_equal_the_plain_log_softmax(temperature: float, chunk_rows: int | None) -> None:
    logits, targets, weights = _case(torch.float32)
    ours = _value_and_grad(lambda x, t, temp: target_logprobs(x, t, temperature=temp, chunk_rows=chunk_rows),
                           logits, targets, weights, temperature)
    plain = _value_and_grad(_plain, logits, targets, weights, temperature)
    bound = VOCAB * torch.finfo(torch.float32).eps * float(logits.abs().max() / temperature)
    assert ours[0].dtype == torch.float32
    torch.testing.assert_close(ours[0], plain[0], atol=bound, rtol=0)
    torch.testing.assert_close(ours[1], plain[1], atol=bound * float(weights.abs().max()), rtol=0)
    assert (ours[1].sum(dim=1).abs() < 1e-5).all()  # a log-softmax gradient sums to 0 over the vocabulary


def test_bfloat16_logits_get_a_bfloat16_gradient_within_one_rounding() -> None:
    logits, targets, weights = _case(torch.bfloat16, seed=1)
    ours = _value_and_grad(lambda x, t, temp: target_logprobs(x, t, temperature=temp, chunk_rows=8),
                           logits, targets, weights, 1.0)
    plain = _value_and_grad(_plain, logits, targets, weights, 1.0)
    assert ours[1].dtype == torch.bfloat16
    bound = VOCAB * torch.finfo(torch.float32).eps * float(logits.float().abs().max())
    torch.testing.assert_close(ours[0], plain[0], atol=bound, rtol=0)
    torch.testing.assert_close(ours[1].float(), plain[1].float(), atol=2**-8 * float(plain[1].float().abs().max()),
                               rtol=0)


def test_entropy_in_chunks_equals_the_plain_entropy() -> None:
    logits, _, _ = _case(torch.float32)
    log_probs = torch.log_softmax(logits / 0.7, dim=-1)
    expected = -(log_probs.exp() * log_probs).sum(dim=-1)
    torch.testing.assert_close(entropy(logits, temperature=0.7, chunk_rows=8), expected, atol=1e-4, rtol=0)


def test_entropy_has_the_plain_entropys_gradient_where_the_logits_require_one() -> None:
    # The update's entropy bonus differentiates it; without grad the chunked path returns no graph.
    # Both sides compute in float32 and differ only in summation order: the module docstring's bound, with the
    # entropy's log-probabilities (at most log V + max|logit / t|) as the gradient's scale.
    logits = torch.randn(5, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    leaf = logits.clone().requires_grad_(True)
    got = entropy(leaf, temperature=0.7)
    got.sum().backward()
    plain_leaf = logits.clone().requires_grad_(True)
    log_probs = torch.log_softmax(plain_leaf.float() / 0.7, dim=-1)
    (-(log_probs.exp() * log_probs).sum(dim=-1)).sum().backward()
    scale = float(logits.abs().max() / 0.7)
    bound = 11 * torch.finfo(torch.float32).eps * scale * (scale + torch.log(torch.tensor(11.0)).item())
    torch.testing.assert_close(leaf.grad, plain_leaf.grad, atol=bound, rtol=0)
    assert leaf.grad.abs().max() > 100 * bound
    torch.testing.assert_close(got.detach(), entropy(logits, temperature=0.7, chunk_rows=2), atol=bound, rtol=0)
    with torch.no_grad():
        assert entropy(leaf).grad_fn is None


def _saved_bytes(fn, logits: torch.Tensor) -> int:
    """The bytes autograd saves for the backward of ``fn(leaf)`` (saved-tensor hooks), beyond the leaf itself."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    leaf = logits.clone().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(leaf)
    return sum(seen.values()) - leaf.untyped_storage().nbytes() * (leaf.untyped_storage().data_ptr() in seen)


def test_autograd_keeps_no_float32_copy_of_the_logits() -> None:
    """What the backward keeps, counted by autograd's saved-tensor hooks: the bfloat16 logits and [M] vectors,
    against the plain form's float32 log-softmax [M, V] (twice the bytes of the bfloat16 logits)."""
    logits, targets, _ = _case(torch.bfloat16)
    plain = _saved_bytes(lambda x: _plain(x, targets, 1.0), logits)
    ours = _saved_bytes(lambda x: target_logprobs(x, targets), logits)
    assert plain >= 4 * ROWS * VOCAB  # the float32 log-softmax
    assert ours <= 16 * ROWS  # beyond the logits themselves: the targets and the logsumexp


@pytest.mark.parametrize("chunk_rows", [None, 3])
def test_entropy_gradient_under_weighted_rows_equals_the_plain_forms(chunk_rows: int | None) -> None:
    """The entropy bonus weighs each row by its token's share of the loss: a non-uniform upstream gradient, whole
    and in chunks, against the plain form in float64.

    ``entropy`` computes in float32 whatever the logits' dtype, so the two differ by float32 rounding, not by
    nothing: the gradient -p (log p + H) w / t has log p + H of size up to max|logit / t| + log V, whose float32
    logsumexp over V terms is off by about eps * sqrt(V) of that (``tests/float_bounds.py``), times p <= 1 and
    max|w| / t. Measured 1.4e-6 against a bound of 2.9e-4 and gradients of size 2."""
    logits, _, weights = _case(torch.float64, seed=4)
    leaf, plain_leaf = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    (entropy(leaf, temperature=0.8, chunk_rows=chunk_rows) * weights).sum().backward()
    log_probs = torch.log_softmax(plain_leaf / 0.8, dim=-1)
    (-(log_probs.exp() * log_probs).sum(dim=-1) * weights).sum().backward()
    scale = float(logits.abs().max() / 0.8) + math.log(VOCAB)
    bound = reordered_sum_gap(torch.float32, VOCAB, scale * float(weights.abs().max()) / 0.8)
    torch.testing.assert_close(leaf.grad, plain_leaf.grad, atol=bound, rtol=0)
    assert plain_leaf.grad.abs().max() > 100 * bound


def test_entropy_autograd_keeps_no_float32_copy_of_the_logits() -> None:
    """The entropy bonus's backward keeps the bfloat16 logits and the [M] entropy, not a float32 [M, V]."""
    logits, _, _ = _case(torch.bfloat16)
    assert _saved_bytes(lambda x: entropy(x, temperature=0.7), logits) <= 4 * ROWS  # the float32 entropy [M]
