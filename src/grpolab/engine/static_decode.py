"""The lean decoder's static (CUDA) sampling loop: each step runs the forward, draws the next token and records it,
on device tensors only, so that a CUDA graph can capture it and the host does nothing per token but replay.

Shapes: B rows, T new tokens at most, V vocabulary.

One step (``StaticDecode._step``) is ``LeanLlama.static_step`` (the forward of the token in ``_token``, over the
cache's first ``bucket_end`` slots) followed by ``token_draw.next_token`` on its logits with the uniform of this
step's column, read from the preallocated draws [T, B, 1] (``rollout._Draws``: the uniforms the CPU loop draws, so a
seed gives the same tokens as the CPU's loop). The token (pad after a row's EOS), its entropy and log-prob are
written in place into preallocated outputs [B, T] at the column, the row's finished flag is raised at its EOS, the
token goes into ``_token`` for the next step, and the column advances. The first token, drawn from the prefill's
logits, is drawn by the same code outside the step.

How it departs from ``rollout._decode``'s loop (the CPU's dynamic step; the same tokens, entropies and log-probs):

* The draw, top-p and the bookkeeping run inside the step; nothing is returned per token and nothing is cloned
  (the CPU's loop gets logits back from every step and appends three [B] tensors).
* The step has one static shape per length bucket (``fast_decode.bucket_slots``): it reads the cache's first
  ``bucket_end`` slots, about the written ones, instead of the whole capacity. On CUDA (``mode`` "graph") each
  bucket's step is captured as a ``torch.cuda.CUDAGraph`` the first time the rollout reaches it (after one
  warm-up step on a side stream of the model's GPU, whose effects on the step's state are taken back), all of them
  in one memory pool (their temporaries die inside each replay), and replayed per token. The host picks the
  bucket from its own count of steps, so no step reads a length back.
* Where a capture fails, or a graph's first replay writes nothing (captured empty), the step is redone eagerly
  and the rollout goes on eagerly, with one warning per process; later rollouts of the process do not try again
  (``fast_decode._GRAPH_FAILURE``).
* The loop and its graphs are kept with the decoder (``loop_for``) and serve the next rollout of the same rows,
  cache capacity, new tokens and sampling settings: its outputs are reset and its draws written in place, so the
  graphs replay without a new capture. The decoder drops the loop when its prefill had to allocate new inputs or
  ``refresh`` met a replaced embedding table.
* The host asks whether every row has finished every ``check_every`` steps (``rollout._FINISH_CHECK_EVERY`` on
  an accelerator); ``rollout`` drops the steps run past the last EOS.

On the CPU ``tests/engine/test_fast_decode.py`` runs this loop eagerly and through a stand-in for CUDA's graph
API; the CUDA graph itself runs only on a GPU (``scripts/gpu_check.sh``, ``benchmarks/bench_gpu.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from grpolab.engine import fast_decode
from grpolab.engine.token_draw import next_token

__all__ = ["StaticDecode", "loop_for"]


class StaticDecode:
    """One rollout's sampling on a ``LeanLlama`` whose ``mode`` is "static" or "graph", after its ``prefill``.

    Args:
        lean: the decoder, prefilled for ``max_new_tokens``.
        max_new_tokens: T.
        sampling: (temperature, top_p); temperature 0 is greedy.
        uniforms: [T, B, 1] the draws on the decoder's device (None when greedy).
        special: (EOS id, pad id).
    """

    def __init__(self, lean: fast_decode.LeanLlama, max_new_tokens: int, sampling: tuple[float, float],
                 uniforms: torch.Tensor | None, special: tuple[int, int]):
        self.lean, self.max_new_tokens = lean, max_new_tokens
        (self.temperature, self.top_p), (self.eos_id, self.pad_id) = sampling, special
        rows, on = lean._token.shape[0], {"device": lean.device}
        self.uniforms = uniforms
        self.tokens = torch.full((rows, max_new_tokens), self.pad_id, dtype=torch.long, **on)  # [B, T]
        self.entropies = torch.zeros((rows, max_new_tokens), **on)
        self.logprobs = torch.zeros((rows, max_new_tokens), **on)
        self.finished = torch.zeros(rows, dtype=torch.bool, **on)
        self.column = torch.zeros(1, dtype=torch.long, **on)
        self.width = lean._keys.shape[3] - max_new_tokens
        self._graphs: dict[int, Any] = {}  # bucket end -> its captured step
        self._pool: Any = None
        self.key: tuple = ()  # what ``loop_for`` keeps it for

    def reset(self, uniforms: torch.Tensor | None) -> None:
        """Ready the loop for another rollout of the same shapes: outputs, finished flags and column back to their
        start and the new ``uniforms`` [T, B, 1] written into its draws, all in place (its graphs read them)."""
        self.tokens.fill_(self.pad_id)
        self.entropies.zero_()
        self.logprobs.zero_()
        self.finished.zero_()
        self.column.zero_()
        if uniforms is not None:
            self.uniforms.copy_(uniforms)

    def sample(self, logits: torch.Tensor, check_every: int) -> int:
        """Draw the first token from the prefill's ``logits`` [B, V], then step until T tokens or, checked every
        ``check_every`` steps, every row has finished. Returns the number of tokens drawn (``outputs``)."""
        if self.max_new_tokens == 0:
            return 0
        self._draw(logits)
        drawn = 1
        while drawn < self.max_new_tokens and not (drawn % check_every == 0 and bool(self.finished.all())):
            self._advance(self.lean.bucket_end(self.width + drawn), drawn)
            drawn += 1
        return drawn

    def outputs(self, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The first ``steps`` tokens, entropies and log-probs, [steps, B] each: copies, since the next rollout of a
        kept loop (``loop_for``) overwrites its outputs in place."""
        return tuple(values[:, :steps].T.clone() for values in (self.tokens, self.entropies, self.logprobs))

    def _draw(self, logits: torch.Tensor) -> None:
        """The next token of every row from ``logits`` [B, V], recorded at ``column`` and fed to ``_token``."""
        uniform = None if self.uniforms is None else self.uniforms.index_select(0, self.column).squeeze(0)  # [B, 1]
        token, entropy, logprob = next_token(logits, self.temperature, self.top_p, None, uniform)
        token = torch.where(self.finished, self.pad_id, token)
        self.finished |= token == self.eos_id
        for output, value in zip((self.tokens, self.entropies, self.logprobs), (token, entropy, logprob), strict=True):
            output.index_copy_(1, self.column, value[:, None])
        self.lean._token.copy_(token)
        self.column.add_(1)

    def _step(self, end: int) -> None:
        """The step a graph captures: the forward of ``_token`` over the first ``end`` slots, then the draw."""
        self._draw(self.lean.static_step(end))

    def _advance(self, end: int, column: int) -> None:
        """The step into ``column``: its bucket's graph replayed (captured first if new), else run eagerly."""
        if self.lean.mode == "graph" and end not in self._graphs:
            self._capture(end)
            if self.lean.mode == "graph":
                self._first_replay(end, column)
                return
        if self.lean.mode == "graph":
            self._graphs[end].replay()
        else:
            self._step(end)

    def _state(self) -> tuple[torch.Tensor, ...]:
        """The step's inputs that it advances or accumulates (its writes to the cache and the outputs at the
        current slot and column are redone by the next run of the same step)."""
        lean = self.lean
        return lean._slot, lean._next_position, lean._key_bias, lean._token, self.finished, self.column

    def _restore(self, saved: tuple[torch.Tensor, ...]) -> None:
        for buffer, value in zip(self._state(), saved, strict=True):
            buffer.copy_(value)

    def _capture(self, end: int) -> None:
        """Capture ``_step(end)`` as a CUDA graph on the model's device and a stream of that device (after one
        warm-up step on that stream, taken back, so that the first replay redoes it); where capture fails, step
        eagerly from now on (``_fall_back``)."""
        device = self.lean.device
        saved = tuple(t.clone() for t in self._state())
        try:
            with torch.cuda.device(device):  # the capture stream, the graph and its pool on the model's GPU
                stream = torch.cuda.Stream(device)
                stream.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(stream):
                    self._step(end)
                torch.cuda.current_stream(device).wait_stream(stream)
                self._restore(saved)
                self._pool = self._pool if self._pool is not None else torch.cuda.graph_pool_handle()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool, stream=stream):
                    self._step(end)
            self._graphs[end] = graph
        except Exception as error:  # any capture failure means: step eagerly
            self._fall_back(saved, f"{type(error).__name__}: {' '.join(str(error).split())[:200]}")

    def _first_replay(self, end: int, column: int) -> None:
        """The first replay of a new graph, checked: it must write its entropies at ``column`` (filled with NaN
        before it) and advance the cache slot. A graph that did neither was captured empty (on another device's
        stream, say): the step is taken back and run eagerly, and the rollout goes on eagerly (``_fall_back``)."""
        saved = tuple(t.clone() for t in self._state())
        self.entropies[:, column].fill_(float("nan"))
        self._graphs[end].replay()
        wrote = not bool(torch.isnan(self.entropies[:, column]).all()) and bool((self.lean._slot == saved[0] + 1).all())
        if not wrote:
            self._fall_back(saved, "the captured graph's first replay wrote no tokens (an empty capture)")
            self._step(end)

    def _fall_back(self, saved: tuple[torch.Tensor, ...], reason: str) -> None:
        """Step eagerly from now on: the step's state back to ``saved``, the reason recorded in the decoder's
        ``fallback`` (the run's record of how it sampled) and, once per process, in ``_GRAPH_FAILURE`` and one
        warning line."""
        self._graphs.clear()
        self.lean.mode = "static"
        self._restore(saved)
        self.lean.fallback = reason
        if not fast_decode._GRAPH_FAILURE:
            fast_decode._GRAPH_FAILURE.append(reason)
            warnings.warn(f"CUDA graph capture of the lean decoder's step failed ({reason}); it steps eagerly (same "
                          "tokens, about 3x slower on a GPU); the run records it as sampler fallback", RuntimeWarning,
                          stacklevel=6)


def loop_for(lean: fast_decode.LeanLlama, max_new_tokens: int, sampling: tuple[float, float],
             uniforms: torch.Tensor | None, special: tuple[int, int]) -> StaticDecode:
    """The sampling loop of ``lean``'s rollout after its ``prefill`` (arguments as ``StaticDecode``'s): the loop
    kept from the last rollout, reset in place, where it was made for the same rows, capacity, new tokens, sampling
    settings and special tokens and the prefill kept its inputs (``lean._loop``); else a new one, kept."""
    key = (tuple(lean._keys.shape), max_new_tokens, tuple(sampling), uniforms is None, tuple(special))
    loop = lean._loop
    if isinstance(loop, StaticDecode) and loop.key == key:
        loop.reset(uniforms)
        return loop
    loop = StaticDecode(lean, max_new_tokens, sampling, uniforms, special)
    loop.key, lean._loop = key, loop
    return loop
