"""The update's log-probs with each prompt forwarded once: the rows of a group packed behind their prompt.

GRPO trains the G completions of a prompt together. The padded forward (``rollout.token_logprobs``)
runs the prompt G times and every completion to the longest one's length. Here each run of adjacent
rows with the same prompt becomes one sequence [prompt, completion 1, ..., completion k] with the
padding dropped; each completion's positions continue from the end of the prompt, and the attention
mask is a tree: a prompt token sees the prompt tokens before it, a completion token sees the whole
prompt and the earlier tokens of its own completion. Every completion token so has exactly the context
it has in the padded forward, and its log-prob is the same function of the weights (equal up to the
kernels' rounding; ``tests/engine/test_lean_forward.py`` checks values and gradients against the
transformers forward). The forward and backward touch only real tokens: one prompt plus the real
completion tokens per group, instead of G x (prompt width + longest completion).

The same idea as the shared-prefix attention of tree decoding and of prefix-caching trainers; here it
is a plain dense mask over short sequences (one per group), so attention stays a small share.

Accepted: models ``lean_forward.supports`` (the Llama family), rows whose prompt masks are left padding
(a suffix of ones, at least one token) and whose completion masks are a prefix of ones (1 up to and
including the first EOS, as ``rollout`` makes them). ``logprobs`` returns None for anything else, and
the caller runs the padded forward.

Memory: the head's logits [M, V] are the only full-vocabulary tensor the forward keeps (besides their gradient in
the backward): ``target_logprobs`` takes the target's log-prob without a float32 log-softmax.

Devices: the packing (index arithmetic on Python lists) is built on the host from host copies of the masks, then
moved to the model's device in one copy per tensor; the forward and the returned log-probs are on that device.

Shapes: R rows, Lp prompt columns, T completion columns, S packed sequences, N the longest packed
sequence, M real completion tokens, D hidden size, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpolab.devices import model_device, to_host
from grpolab.engine import lean_forward
from grpolab.engine.target_logprobs import target_logprobs

__all__ = ["logprobs"]


@dataclass
class _Packing:
    """Where each packed token comes from and what it may attend to.

    Attributes:
        source: [S, N] flat index into the rows' [R, Lp + T] prompt-then-completion ids.
        positions: [S, N] rotary positions (0 at each prompt's first real token).
        mask: [S, 1, N, N] True where a query may attend to a key.
        predictors: [M] flat index into [S * N] of the hidden state that predicts each completion token.
        targets: [M] flat index into [R * T] of each completion token.
    """

    source: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor
    predictors: torch.Tensor
    targets: torch.Tensor

    def to(self, device: torch.device) -> _Packing:
        return _Packing(*(t.to(device) for t in (self.source, self.positions, self.mask, self.predictors,
                                                  self.targets)))


def _segments(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """Runs of adjacent rows with the same prompt ids and mask (a group's rows, or part of one)."""
    same = ((prompt_ids[1:] == prompt_ids[:-1]) & (prompt_mask[1:] == prompt_mask[:-1])).all(dim=1).tolist()
    segments = [[0]]
    for row, joins in enumerate(same, start=1):
        if joins:
            segments[-1].append(row)
        else:
            segments.append([row])
    return segments


def _is_prefix(mask: torch.Tensor, lengths: torch.Tensor) -> bool:
    """Whether each row of mask [R, W] is ones for its first ``lengths`` columns and zeros after."""
    return bool((mask.bool() == (torch.arange(mask.shape[1]) < lengths[:, None])).all())


def _tree_mask(branch: torch.Tensor) -> torch.Tensor:
    """[S, 1, N, N] from branch [S, N] (0 prompt, i > 0 completion i, -1 padding): causal, and a key
    outside the prompt only for queries of its own completion; a padding query sees itself."""
    width = branch.shape[1]
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    keys, queries = branch[:, None, :], branch[:, :, None]
    allowed = causal & ((keys == 0) | (keys == queries)) & (keys >= 0)
    return (allowed | torch.diag_embed(branch < 0))[:, None]


def _sequence(rows: list[int], prompt_length: int, completion_lengths: list[int], prompt_width: int,
              completion_width: int) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """One packed sequence: the prompt of ``rows[0]``, then each row's completion. Returns (source,
    positions, branch, predictors within the sequence, targets) as in ``_Packing``."""
    width = prompt_width + completion_width
    source = list(range(rows[0] * width + prompt_width - prompt_length, rows[0] * width + prompt_width))
    positions, branch = list(range(prompt_length)), [0] * prompt_length
    predictors: list[int] = []
    targets: list[int] = []
    for index, row in enumerate(rows, start=1):
        count, start = completion_lengths[row], len(source)
        predictors += [prompt_length - 1, *range(start, start + count - 1)][:count]  # the state before each token
        targets += range(row * completion_width, row * completion_width + count)
        source += range(row * width + prompt_width, row * width + prompt_width + count)
        positions += range(prompt_length, prompt_length + count)
        branch += [index] * count
    return source, positions, branch, predictors, targets


def _pack(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_mask: torch.Tensor) -> _Packing | None:
    prompt_lengths, completion_lengths = prompt_mask.sum(dim=1), completion_mask.sum(dim=1)
    if (prompt_lengths == 0).any() or not _is_prefix(completion_mask, completion_lengths) \
            or not _is_prefix(prompt_mask.flip(1), prompt_lengths):
        return None
    prompt_lengths, completion_lengths = prompt_lengths.tolist(), completion_lengths.tolist()
    widths = (prompt_mask.shape[1], completion_mask.shape[1])
    sequences = [_sequence(rows, prompt_lengths[rows[0]], completion_lengths, *widths)
                 for rows in _segments(prompt_ids, prompt_mask)]
    longest = max(len(sequence[0]) for sequence in sequences)

    def padded(field: int, value: int) -> torch.Tensor:  # [S, N]
        return torch.tensor([seq[field] + [value] * (longest - len(seq[field])) for seq in sequences])

    predictors = [index * longest + p for index, seq in enumerate(sequences) for p in seq[3]]
    targets = [t for seq in sequences for t in seq[4]]
    return _Packing(padded(0, 0), padded(1, 0), _tree_mask(padded(2, -1)), torch.tensor(predictors, dtype=torch.long),
                    torch.tensor(targets, dtype=torch.long))


def logprobs(model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
             completion_ids: torch.Tensor, completion_mask: torch.Tensor, *, temperature: float = 1.0,
             ) -> torch.Tensor | None:
    """Log-probs [R, T] of the completion tokens (0 where completion_mask is 0) at ``temperature``, with
    autograd; prompt_ids, prompt_mask [R, Lp], completion_ids, completion_mask [R, T]. None when the
    model or the rows are not accepted (module docstring)."""
    if not lean_forward.supports(model):
        return None
    packing = _pack(to_host(prompt_ids), to_host(prompt_mask), to_host(completion_mask))
    if packing is None:
        return None
    device = model_device(model)
    packing = packing.to(device)
    prompt_ids, completion_ids = prompt_ids.to(device), completion_ids.to(device)
    rows, width = completion_ids.shape
    ids = torch.cat([prompt_ids, completion_ids], dim=1).reshape(-1)[packing.source]  # [S, N]
    hidden = lean_forward.hidden_states(model, ids, packing.positions, packing.mask)  # [S, N, D]
    logits = lean_forward.head(model, hidden.reshape(-1, hidden.shape[-1])[packing.predictors])  # [M, V]
    tokens = completion_ids.reshape(-1)[packing.targets]  # [M]
    picked = target_logprobs(logits, tokens, temperature=temperature)  # no [M, V] float32 log-softmax kept
    return picked.new_zeros(rows * width).scatter(0, packing.targets, picked).view(rows, width)
