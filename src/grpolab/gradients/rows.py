"""Per-completion policy gradients of a rollout batch, optionally compressed by a seeded CountSketch.

Row i of the gradient matrix is g_i = d/dtheta sum_t log pi(y_i,t | x_i, y_i,<t) over a chosen parameter
set (``select_parameters``: LoRA adapters, name substrings, or all trainable parameters). Under an
outcome-only reward every token of completion i carries the same advantage A_i (the credit-assignment
collapse of the GRPO policy-gradient-foundations paper), so the "sum" aggregated policy gradient of a batch
is exactly sum_i A_i g_i: one row per completion loses nothing. ``token_advantages`` gives that per-token
view [B, T] explicitly. Under per-token advantages A_i,t (``--reward-granularity token``) that collapse is
gone, and ``per_completion_gradients(..., token_weights=A)`` also returns each completion's weighted row
w_i = sum_t A_i,t dlog pi(y_i,t)/dtheta (one forward, two backwards per completion). The geometry
(effective rank, rank-2 check, sparsity) is in
``grpolab.gradients.geometry``.

Memory: rows are kept exactly when B x D fits in ``max_entries`` (float32); otherwise each row is projected
on the fly by a CountSketch (Charikar, Chen & Farach-Colton 2002; Clarkson & Woodruff 2013) into k buckets:
entry j goes to bucket h(j) with sign s(j). Only h and s (5 bytes per parameter) are stored, never a
D x k matrix. Inner products are unbiased, E<Sx, Sy> = <x, y>, with variance <= 2 |x|^2 |y|^2 / k, and the
projection is linear, so every identity between rows (the rank-2 structure) survives it exactly.

Departures from the paper: the paper's gradients are of the GRPO loss of a 4B model on GSM8K (token-mean
aggregation, clipping); here rows are gradients of summed log-probabilities at the sampling policy (ratio 1,
no clipping), which is the on-policy GRPO gradient up to the aggregation's per-token normaliser. One
forward and backward per completion (padding removed); ``torch.func.vmap`` is not used (see
docs/gradient-geometry.md for the measurement).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from grpolab.devices import model_device, to_host
from grpolab.engine import prefix_packing
from grpolab.engine.rollout import token_logprobs
from grpolab.errors import UserError
from grpolab.process_rewards import is_per_token

__all__ = [
    "CountSketch",
    "GradientRows",
    "per_completion_gradients",
    "select_parameters",
    "summed_policy_gradient",
    "token_advantages",
]

DEFAULT_MAX_ENTRIES = 1 << 28  # rows x params kept exactly up to this (1 GiB of float32)
DEFAULT_SKETCH_DIM = 4096  # k when the exact matrix would not fit and no sketch_dim is given


class CompletionBatch(Protocol):
    """What the gradient code reads from a batch (``StepBatch`` and ``Rollout`` both qualify)."""

    prompt_ids: torch.Tensor  # [B, Lp] left-padded
    prompt_mask: torch.Tensor  # [B, Lp]
    completion_ids: torch.Tensor  # [B, T] right-padded
    completion_mask: torch.Tensor  # [B, T]


def select_parameters(model: torch.nn.Module, params: str | Sequence[str] | None = None) -> dict[str, torch.Tensor]:
    """The parameters whose gradients form the columns, by name, in ``named_parameters`` order.

    ``params``: None or "trainable" (every parameter with requires_grad), "all" (every parameter),
    "lora" (names containing ``lora_``), or name substrings (a list, or one comma-separated string).
    """
    named = list(model.named_parameters())
    if params is None or params == "trainable":
        chosen = [(n, p) for n, p in named if p.requires_grad]
    elif params == "all":
        chosen = named
    else:
        parts = params.split(",") if isinstance(params, str) else list(params)
        wanted = ["lora_" if part.strip() == "lora" else part.strip() for part in parts if part.strip()]
        chosen = [(n, p) for n, p in named if any(w in n for w in wanted)]
    if not chosen:
        examples = ", ".join(n for n, _ in named[:6])
        raise UserError(f"no parameters match {params!r}; names look like: {examples}")
    return dict(chosen)


def token_advantages(advantages: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """Per-token advantages [B, T]: advantages [P, G] (row-major, B = P * G) broadcast over the mask, or
    advantages already [B, T] (per-token rewards) masked.

    For [P, G] this is the outcome-reward credit assignment: every token of completion i gets A_i, padding 0.
    """
    if is_per_token(advantages, completion_mask):
        return advantages.to(torch.float32) * completion_mask.to(torch.float32)
    flat = advantages.reshape(-1).to(torch.float32)  # [B]
    if flat.shape[0] != completion_mask.shape[0]:
        raise UserError(f"advantages hold {flat.shape[0]} completions but the batch has {completion_mask.shape[0]}")
    return flat[:, None] * completion_mask.to(torch.float32)


@dataclass
class CountSketch:
    """A seeded CountSketch R^D -> R^k over a list of parameter shapes; hashes are drawn lazily per parameter."""

    dim: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise UserError(f"sketch_dim must be >= 1, got {self.dim}")
        self._hashes: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _hash(self, index: int, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index not in self._hashes:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
            buckets = torch.randint(0, self.dim, (numel,), generator=generator, dtype=torch.int64)
            signs = torch.randint(0, 2, (numel,), generator=generator, dtype=torch.int8) * 2 - 1
            self._hashes[index] = (buckets, signs)
        return self._hashes[index]

    def project(self, grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """Sketch [k] of the concatenation of ``grads`` (parameter i uses hash i)."""
        out = torch.zeros(self.dim, dtype=torch.float32)
        for index, grad in enumerate(grads):
            buckets, signs = self._hash(index, grad.numel())
            out.index_add_(0, buckets, grad.reshape(-1).float() * signs)
        return out


@dataclass
class GradientRows:
    """Per-completion gradients [B, K]: K = D (exact) or the sketch dimension.

    Attributes:
        rows: [B, K] float32; row i is g_i (unweighted), for completions in batch order.
        dim: D, the number of parameters (columns before any sketch).
        sketch_dim: k if the rows are sketched, else None.
        names: the parameter names, in column order.
        sketch: the CountSketch used (None for exact rows), to project other vectors the same way.
        weighted: [B, K] rows w_i = sum_t A_i,t dlog pi_i,t/dtheta when token weights were given, else None.
    """

    rows: torch.Tensor
    dim: int
    sketch_dim: int | None
    names: list[str]
    sketch: CountSketch | None = None
    weighted: torch.Tensor | None = None

    def project(self, grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """A gradient given per parameter (same order as ``names``) as a row in this matrix's columns [K]."""
        if self.sketch is not None:
            return self.sketch.project(grads)
        return torch.cat([g.reshape(-1).float() for g in grads])


@contextlib.contextmanager
def _requiring_grad(params: dict[str, torch.Tensor]) -> Iterator[None]:
    """Temporarily let every chosen parameter require grad (frozen ones too); restores the flags."""
    flags = {name: p.requires_grad for name, p in params.items()}
    try:
        for p in params.values():
            p.requires_grad_(True)
        with torch.enable_grad():
            yield
    finally:
        for name, p in params.items():
            p.requires_grad_(flags[name])


def _row_logprobs(model: torch.nn.Module, batch: CompletionBatch, row: int, temperature: float) -> torch.Tensor:
    """[L] log pi of each token of completion ``row``, computed on that row alone with its padding removed."""
    prompt = batch.prompt_ids[row][batch.prompt_mask[row].bool()]
    length = int(batch.completion_mask[row].sum())
    ids = torch.cat([prompt, batch.completion_ids[row, :length]]).unsqueeze(0).to(model_device(model))
    logprobs, _ = token_logprobs(model, ids, torch.ones_like(ids), length, temperature=temperature)
    return logprobs.float()[0]


def _row_gradients(model: torch.nn.Module, batch: CompletionBatch, row: int, tensors: list[torch.Tensor],
                   temperature: float, weights: torch.Tensor | None) -> tuple[list, list | None]:
    """Gradients of sum_t log pi and (with ``weights`` [T]) of sum_t weights_t log pi for completion ``row``."""
    logprobs = _row_logprobs(model, batch, row, temperature)
    outputs = [logprobs.sum()] + ([] if weights is None else [(logprobs * weights[: len(logprobs)]).sum()])
    found = []
    for index, output in enumerate(outputs):
        grads = torch.autograd.grad(output, tensors, allow_unused=True, retain_graph=index + 1 < len(outputs))
        found.append([torch.zeros_like(p) if g is None else g for g, p in zip(grads, tensors, strict=True)])
    return found[0], found[1] if weights is not None else None


def per_completion_gradients(
    model: torch.nn.Module, batch: CompletionBatch, *, params: str | Sequence[str] | None = None,
    sketch_dim: int | None = None, seed: int = 0, temperature: float = 1.0,
    max_entries: int = DEFAULT_MAX_ENTRIES, token_weights: torch.Tensor | None = None,
) -> GradientRows:
    """Row i = gradient of completion i's summed token log-probability; one forward + backward per row.

    Rows are exact unless ``sketch_dim`` is given or B x D > ``max_entries`` (then k = DEFAULT_SKETCH_DIM).
    With ``token_weights`` [B, T] (per-token advantages) ``weighted`` holds w_i = gradient of
    sum_t weights_i,t log pi_i,t too (a second backward per row). Parameter ``.grad`` fields are not touched
    (``torch.autograd.grad``); the model is left in its mode.
    """
    chosen = select_parameters(model, params)
    tensors = list(chosen.values())
    dim = sum(p.numel() for p in tensors)
    size = batch.completion_ids.shape[0]
    if sketch_dim is None and size * dim > max_entries:
        sketch_dim = DEFAULT_SKETCH_DIM
    sketch = CountSketch(int(sketch_dim), seed) if sketch_dim else None
    rows = torch.zeros(size, sketch.dim if sketch else dim, dtype=torch.float32)
    weighted = None if token_weights is None else torch.zeros_like(rows)

    def flatten(grads: list[torch.Tensor]) -> torch.Tensor:  # on the host, where the rows are kept
        grads = [to_host(g) for g in grads]
        return sketch.project(grads) if sketch else torch.cat([g.reshape(-1).float() for g in grads])

    with _requiring_grad(chosen):
        for row in range(size):
            if int(batch.completion_mask[row].sum()) == 0:
                continue  # an empty completion has log-prob 0 and gradient 0
            weights = None if token_weights is None else token_weights[row].float().to(model_device(model))
            grads, weighted_grads = _row_gradients(model, batch, row, tensors, temperature, weights)
            rows[row] = flatten(grads)
            if weighted is not None:
                weighted[row] = flatten(weighted_grads)
    return GradientRows(rows, dim, sketch.dim if sketch else None, list(chosen), sketch, weighted)


def summed_policy_gradient(
    model: torch.nn.Module, batch: CompletionBatch, advantages: torch.Tensor, *,
    params: str | Sequence[str] | None = None, temperature: float = 1.0,
) -> dict[str, torch.Tensor]:
    """sum_i A_i g_i per parameter (one batched forward + backward), the "sum" aggregated policy gradient.

    The forward is the update's: each prompt once with its rows' completions packed behind it
    (``grpolab.engine.prefix_packing``) where the model and rows allow, else the padded forward; the two agree up
    to the kernels' rounding. Returns {name: gradient} with each parameter's shape (2-D weights stay matrices).
    """
    chosen, device = select_parameters(model, params), model_device(model)
    weights = token_advantages(to_host(advantages), to_host(batch.completion_mask)).to(device)
    with _requiring_grad(chosen):
        logprobs = _completion_logprobs(model, batch, temperature)
        objective = (logprobs.float() * weights).sum()
        grads = torch.autograd.grad(objective, list(chosen.values()), allow_unused=True)
    return {name: to_host(torch.zeros_like(p) if g is None else g)  # on the host, with the per-row gradients
            for (name, p), g in zip(chosen.items(), grads, strict=True)}


def _completion_logprobs(model: torch.nn.Module, batch: CompletionBatch, temperature: float) -> torch.Tensor:
    """[B, T] log-probs of the batch's completion tokens with autograd: packed behind their prompts where
    ``prefix_packing`` accepts the model and rows (0 at masked positions), else the padded forward."""
    packed = prefix_packing.logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                     batch.completion_mask, temperature=temperature)
    if packed is not None:
        return packed
    device = model_device(model)
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1).to(device)
    mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1).to(device)
    return token_logprobs(model, ids, mask, batch.completion_ids.shape[1], temperature=temperature)[0]


def as_batch(obj: Any) -> CompletionBatch:
    """Check that ``obj`` has the four [B, *] tensors the gradient code reads; return it unchanged."""
    missing = [a for a in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask") if not hasattr(obj, a)]
    if missing:
        raise UserError(f"batch lacks {missing}; pass a StepBatch or a Rollout")
    return obj

