"""The log-probability of one target token per row of logits, without a full-vocabulary float32 log-softmax.

Shapes: M rows (the completion tokens of a micro-batch), V vocabulary.

``log_softmax(logits / t)[m, target[m]]`` is ``logits[m, target[m]] / t - logsumexp(logits[m] / t)``. The update
needs only that one entry per row, and its gradient ``(onehot(target) - softmax(logits / t)) * g / t``. Written
with ``torch.log_softmax(...).gather(...)``, autograd keeps an [M, V] float32 log-softmax for the backward, and the
float32 cast, the division and the backward's scatter and softmax gradient each make another [M, V] float32
tensor. ``target_logprobs`` instead:

* forwards in chunks of rows: each chunk's ``logsumexp`` in float32 (one [chunk, V] float32 temporary), the
  target's logit gathered from the logits in their own dtype;
* saves only the logits (which the caller's graph made anyway: bfloat16 under autocast) and the [M] logsumexp;
* backwards in the same chunks, writing the gradient in the logits' dtype straight into one [M, V] tensor: the
  gradient the plain form hands to the logits, cast to their dtype at the same point.

Peak [M, V] memory of a forward and backward: the logits and their gradient (two [M, V] tensors in the logits'
dtype) and one float32 chunk, against the logits plus three to four [M, V] float32 tensors. Measured on the CPU
(``benchmarks/bench_logprob_memory.py``, M = 2048, V = 49,152, bfloat16 logits, peak resident memory of a forward and
backward): 581 MiB against 1,347 MiB, 1.5 against 3.5 [M, V] float32 tensors. The values are those of
the plain form up to the float32 summation order of the logsumexp (``tests/engine/test_target_logprobs.py``).

``entropy`` gives the sampling entropy per row in the same chunks, without autograd, and ``sum_pi_squared`` the sum
of the squared probabilities over the vocabulary (the optimal token baseline's path-variance proxy), likewise.
"""

from __future__ import annotations

import torch

__all__ = ["CHUNK_BYTES", "entropy", "sum_pi_squared", "target_logprobs"]

CHUNK_BYTES = 128 * 2**20
"""The float32 temporary of one chunk of rows: [chunk, V] x 4 bytes at most this (at least one row)."""


def _chunks(rows: int, vocab: int, chunk_rows: int | None) -> list[slice]:
    size = chunk_rows or max(1, CHUNK_BYTES // (4 * max(vocab, 1)))
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


class _TargetLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                chunk_rows: int | None) -> torch.Tensor:
        rows, vocab = logits.shape
        lse = torch.empty(rows, dtype=torch.float32, device=logits.device)
        for part in _chunks(rows, vocab, chunk_rows):
            lse[part] = torch.logsumexp(logits[part].to(torch.float32, copy=True).div_(temperature), dim=-1)
        picked = logits.gather(1, targets[:, None]).squeeze(1).float() / temperature - lse
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature, ctx.chunk_rows = temperature, chunk_rows
        return picked

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None]:
        logits, targets, lse = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None
        rows, vocab = logits.shape
        out = torch.empty_like(logits)
        grad = grad.float() / ctx.temperature
        for part in _chunks(rows, vocab, ctx.chunk_rows):
            chunk = logits[part].to(torch.float32, copy=True)  # [chunk, V], a copy even of float32 logits
            chunk.div_(ctx.temperature).sub_(lse[part, None]).exp_()  # the softmax, in place
            chunk.mul_(-grad[part, None])
            chunk.scatter_add_(1, targets[part, None], grad[part, None])
            out[part] = chunk
        return out, None, None, None


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0,
                    chunk_rows: int | None = None) -> torch.Tensor:
    """[M] float32 ``log_softmax(logits / temperature)`` at ``targets`` [M] (long) of logits [M, V], with autograd
    to the logits (module docstring). ``chunk_rows``: rows per chunk (default: ``CHUNK_BYTES`` of float32)."""
    return _TargetLogprobs.apply(logits, targets, float(temperature), chunk_rows)


def entropy(logits: torch.Tensor, *, temperature: float = 1.0, chunk_rows: int | None = None) -> torch.Tensor:
    """[M] float32 entropy (nats) of ``softmax(logits / temperature)`` per row of logits [M, V], in chunks; with
    autograd to the logits where they require it (the update's entropy bonus), through ``_Entropy``: like
    ``target_logprobs`` it keeps only the logits and the [M] entropy for the backward, which recomputes each chunk's
    softmax, so no [M, V] float32 log-softmax is kept."""
    if torch.is_grad_enabled() and logits.requires_grad:
        return _Entropy.apply(logits, float(temperature), chunk_rows)
    with torch.no_grad():
        return _entropy_chunked(logits, temperature, chunk_rows)


class _Entropy(torch.autograd.Function):
    """H = -sum_v p_v log p_v with p = softmax(z), z = logits / t; dH/dlogits_v = -p_v (log p_v + H) / t."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, temperature: float, chunk_rows: int | None) -> torch.Tensor:
        values = _entropy_chunked(logits.detach(), temperature, chunk_rows)
        ctx.save_for_backward(logits, values)
        ctx.temperature, ctx.chunk_rows = temperature, chunk_rows
        return values

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        logits, values = ctx.saved_tensors
        rows, vocab = logits.shape
        out = torch.empty_like(logits)
        grad = grad.float() / ctx.temperature
        for part in _chunks(rows, vocab, ctx.chunk_rows):
            log_probs = torch.log_softmax(logits[part].to(torch.float32, copy=True).div_(ctx.temperature), dim=-1)
            scale = log_probs.exp()  # p, then -p (log p + H) g / t in place
            scale.mul_(log_probs.add_(values[part, None])).mul_(-grad[part, None])
            out[part] = scale
        return out, None, None


def _entropy_chunked(logits: torch.Tensor, temperature: float, chunk_rows: int | None) -> torch.Tensor:
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.float32, device=logits.device)
    for part in _chunks(rows, vocab, chunk_rows):
        log_probs = torch.log_softmax(logits[part].to(torch.float32, copy=True).div_(temperature), dim=-1)
        out[part] = -(log_probs.exp() * log_probs).sum(dim=-1)
    return out


@torch.no_grad()
def sum_pi_squared(logits: torch.Tensor, *, temperature: float = 1.0, chunk_rows: int | None = None) -> torch.Tensor:
    """[M] float32 sum over the vocabulary of pi^2, pi = ``softmax(logits / temperature)`` per row of logits [M, V]:
    exp(logsumexp(2 z) - 2 logsumexp(z)) with z = logits / temperature, in chunks, without autograd."""
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.float32, device=logits.device)
    for part in _chunks(rows, vocab, chunk_rows):
        scaled = logits[part].to(torch.float32, copy=True).div_(temperature)
        out[part] = torch.exp(torch.logsumexp(2 * scaled, dim=-1) - 2 * torch.logsumexp(scaled, dim=-1))
    return out
