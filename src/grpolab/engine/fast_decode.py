"""A lean decoder for Llama-family models: the forward pass of ``LlamaForCausalLM`` (and of its kin:
``Qwen2ForCausalLM``, the same with q/k/v biases; ``Qwen3ForCausalLM``, with a per-head RMSNorm on q and k;
``MistralForCausalLM``, the same as Llama without a sliding window) written as a plain loop over layers on copies of
the weights, with a preallocated KV cache. ``rollout.sample`` uses it for every model it accepts and falls back to
the transformers forward for the rest, with one warning line per model class and reason (``refusal``).

Shapes: B rows (left-padded), Lp prompt tokens, S tokens in one forward (Lp in the prefill, 1 per
decode step), L = Lp + T cache slots, D hidden size, H query heads, Hkv key/value heads, Dh head size.

How it departs from transformers' ``LlamaForCausalLM`` forward (the reference it is tested against):

* The weights are copied into ``dtype`` (``build``'s default bfloat16: this CPU's
  AVX-512 BF16 matmul ran 2x float32's rate, 176 vs 87 GFLOP/s at [32 x 576] . [576 x 1536], in
  benchmarks/bench_engine.py; ``preferred_dtype`` picks per model), with q/k/v fused into one matrix
  and gate/up into another, so a layer is four matmuls. The master weights are not touched. peft LoRA
  adapters are merged into the copy (``W + B A * scaling``), so LoRA adds no per-token cost. A decoder is
  built once per model and sampler dtype and kept (``rollout.sample``); ``refresh`` rewrites its copy in place
  from the model's current weights (``weight_copy``: the same values a new build would copy), which
  ``rollout.sample`` does before each rollout unless the caller holds the weights fixed.
* The residual stream, the RMS norms, the rotary embedding, the KV cache and the attention stay in
  float32 (but for the static (CUDA) step's bfloat16 cache, below); only the weight matmuls' inputs and outputs are
  in ``dtype`` (transformers in bfloat16 runs all of it in bfloat16). ``stream = "bfloat16"`` (opt-in, the static
  step with a bfloat16 cache only) runs the stream, norms and rotation in bfloat16 too, as transformers does, with
  the residual adds fused into the matmuls: fewer operations a layer, for the GPU's launch-bound step.
  Attention over a short cache is a handful of
  tiny matmuls, faster in float32 on this CPU than bfloat16 or ``scaled_dot_product_attention``'s kernel. Logits
  are returned in float32 (computed by a bfloat16 matmul, so they carry its rounding).
* In bfloat16 the matrices are handed to oneDNN prepacked (``torch.ops.mkldnn._reorder_linear_weight``,
  the layout ``torch.compile``'s CPU freezing uses), so a decode step does not re-layout every weight;
  where oneDNN has no bfloat16 kernel, plain ``F.linear`` runs instead.
* The KV cache is two preallocated tensors [layers, B, Hkv, L, Dh]; the attention mask is built once
  per rollout. The cache, the rotary tables and the static step's inputs are kept for the next rollout and
  written in place when its shapes fit (``prefill``). The prefill runs each distinct prompt once and copies its
  cache to the G rows that sample from it (G times less prefill arithmetic; each row's values are those of a
  prefill of all B rows, up to the matmul kernels' rounding).
  A padding query attends to itself, so no softmax row is empty (its output is never used).
* Grouped-query attention groups the queries of a key/value head along the query axis instead of
  repeating the keys and values.

Devices: the copy, the cache and every table live on the device of the model's weights. On a GPU the matrices
are plain bfloat16 (or float32) tensors run by ``F.linear``; the oneDNN prepacking is the CPU's alone.

How the CUDA path departs from the CPU's (``step_mode``; "auto" picks it by device):

* The CPU steps *dynamically*: each step attends over the written slice ``[..., :start + 1]`` of the cache, so
  its shapes grow by one slot a step (the fastest on this CPU; a launch costs nothing there), and returns its
  logits to ``rollout``'s loop, which draws the token.
* On CUDA the step has *static shapes* (``static_step``): it attends over the cache's first ``bucket_end`` slots,
  the written ones rounded up to a multiple of ``bucket_slots`` (32), with the unwritten slots (zeros at
  allocation) under a -inf key bias that each step lifts for its own slot, and it reads its token, its positions
  and its cache slot from device tensors that it advances in place. The rotary tables cover every position a row
  can reach, so no step reads a length back to the host. Its logits are the dynamic step's (the extra slots weigh
  exp(-inf) = 0) up to the kernels' summation order.
* The static step samples inside the step: temperature, top-p, the draw from a preallocated buffer of the uniforms
  the CPU's loop draws, and the token's entropy and log-prob, written in place into per-step outputs [B, T]; the
  token is fed back to the next step (``static_decode``). Each bucket's step is captured as a
  ``torch.cuda.CUDAGraph`` the first time a rollout reaches it and replayed per token: one launch instead of
  ~10 per layer and the sampler's ~15, and nothing copied out per token. The graphs are kept with the decoder
  (``static_decode.loop_for``) and replayed by the next rollout of the same rows, capacity, new tokens and sampling
  settings: its prefill writes the graphs' inputs, and ``refresh`` the weights they read, in place. They are
  captured again only when one of those changes (or the embedding table was replaced). Where capture fails, the
  rollout steps eagerly on the static step, with one warning per process, and later rollouts do not try again.
* The static step's KV cache is bfloat16 on CUDA where the weights are bfloat16 (``kv_cache``; float32 stays the
  CPU's and the float32 weights' cache), halving the bytes a step reads from it; attention over a bfloat16 cache
  runs ``scaled_dot_product_attention`` on bfloat16 queries, keys and values (float32 softmax inside the kernel).
  Keys and values rounded to bfloat16 (relative error <= 2^-8) move the log-probs by about 2^-8 of the attention
  scores' size; ``tests/engine/test_fast_decode.py`` bounds the gap to the float32 cache.
* ``tests/engine/test_fast_decode.py`` runs all of this eagerly on the CPU, and through a stand-in for CUDA's graph
  API (``tests/engine/test_static_decode.py``; ``tests/engine/test_sampler_reuse.py``: the graphs kept across
  rollouts), and compares tokens and log-probs with the dynamic step; on a GPU the graphs with in-step sampling,
  their reuse across rollouts, the buckets and the bfloat16 cache await their first run (``scripts/gpu_check.sh``,
  ``benchmarks/bench_gpu.py``).

Accepted (``FAMILIES``; ``refusal`` gives the reason for anything else, in the fall-back line and the rollout's
``sampler_fallback``), bare or wrapped by peft with plain LoRA on linear layers, SiLU MLP, no other biases, static
rotary scaling (default, linear, llama3: the inverse frequencies and attention scaling are read from the model's
rotary embedding, so Llama 3.x's scaled frequencies are those transformers uses), full attention:

* ``LlamaForCausalLM``.
* ``Qwen2ForCausalLM``: q/k/v biases added in float32 after the fused matmul, the 1 / sqrt(Dh) folded into the
  query's bias too; refused with a sliding window (``use_sliding_window``, ``layer_types``).
* ``Qwen3ForCausalLM``: ``q_norm`` and ``k_norm`` (RMSNorm over each head's Dh, one weight [Dh] each) applied in
  float32 after the projection and before the rotation, in one call over the query and key heads; the 1 / sqrt(Dh)
  is folded into ``q_norm``'s weight (a norm undoes a scale put into the projection). Sliding windows are refused
  as Qwen2's.
* ``MistralForCausalLM``: Llama's forward, taken when ``sliding_window`` is None or at least
  ``max_position_embeddings`` (it then never cuts); a shorter window is refused.

Not implemented, refused with the reason: Gemma 3 (and Gemma 2), whose layer departs from Llama's in too many places
for a flag: RMSNorms that scale by (1 + weight), the embedding scaled by sqrt(hidden size), a GeGLU MLP, norms after
attention and MLP as well as before, q/k norms, and sliding-window layers interleaved with global ones, each kind
with its own rotary base. ``lean_forward`` (the update's forward) takes the bias-free Llama family only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grpolab.engine.families import FAMILIES, base_model, refusal
from grpolab.engine.weight_copy import Weights, copy_weights, packed_linear, packs_bf16, weights_version

__all__ = ["BF16_MIN_HIDDEN", "FAMILIES", "SAMPLER_PATHS", "STEP_MODES", "STREAMS", "LeanLlama", "build",
           "preferred_dtype", "refusal"]

STEP_MODES = ("auto", "dynamic", "static", "graph")
"""How ``LeanLlama.step`` runs (``step_mode``): "dynamic" attends over the written slice of the cache (the CPU's
step), "static" runs the static-shape step eagerly, "graph" replays it as a CUDA graph (falling back to "static"
with one warning where capture fails), "auto" is "graph" on CUDA and "dynamic" elsewhere."""
SAMPLER_PATHS = ("lean graph", "lean static", "lean dynamic", "transformers")
"""How a rollout sampled: the lean decoder's CUDA graph, its static step run eagerly, its dynamic (CPU) step, or the
transformers forward (``rollout.Rollout.sampler``)."""
step_mode = "auto"
"""The process-wide ``STEP_MODES`` choice (benchmarks set "dynamic" to time the eager CUDA step)."""
KV_CACHES = ("auto", "float32", "bfloat16")
"""The static step's KV cache dtype (``kv_cache``): "auto" is bfloat16 on CUDA where the weights are bfloat16, else
float32. The dynamic (CPU) step's cache is float32 whatever this says."""
kv_cache = "auto"
"""The process-wide ``KV_CACHES`` choice for the static step (tests set "bfloat16" to run it on the CPU)."""
STREAMS = ("float32", "bfloat16")
"""The residual stream's dtype of a decoder (``stream``)."""
stream = "float32"
"""The process-wide ``STREAMS`` choice for decoders built from now on. "float32": the residual stream, the norms and
the rotary embedding in float32, the weights' dtype only at the matmuls. "bfloat16": all of it in bfloat16, as
transformers runs a bfloat16 model, for a bfloat16 copy whose static step has a bfloat16 cache (``build`` refuses
anything else): no casts around the norms, the rotation and the cache, the residual adds fused into the output
and down matmuls (``_plus_linear``) and the rotation one matmul (``_rotary``), 8 fewer operations a layer. Its
log-probs depart from the float32 stream's by bfloat16 rounding of the stream (``tests/engine/test_bf16_stream.py``
bounds it); the run's ``rollout/sampler_kl`` measures the gap to the trainer. Opt-in: it has not yet run on a GPU."""
bucket_slots = 32
"""The static step attends over the cache's first slots up to the next multiple of this (capped at the capacity):
one static shape, and one CUDA graph, per bucket. 0: over the whole capacity at every step."""
_GRAPH_FAILURE: list[str] = []  # the first capture failure of this process: later rollouts do not retry
BF16_MIN_HIDDEN = 512
"""Hidden size from which ``preferred_dtype`` picks bfloat16. Measured, one thread: SmolLM2 (576) samples
1.7x faster in bfloat16 than float32; the embedded model (128) 15% slower, its matmuls being too small
for the bfloat16 kernels to pay for their call overhead."""


def preferred_dtype(model: nn.Module) -> torch.dtype:
    """bfloat16 for models with hidden size >= ``BF16_MIN_HIDDEN``, else float32."""
    hidden = getattr(getattr(base_model(model), "config", None), "hidden_size", 0) or 0
    return torch.bfloat16 if hidden >= BF16_MIN_HIDDEN else torch.float32


def build(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> LeanLlama | None:
    """A ``LeanLlama`` on the current weights of ``model`` in ``dtype``, or None if the lean path does not
    accept the model (``refusal`` says why; see the module docstring). ``LeanLlama.refresh`` brings it up to date
    with later weights."""
    if refusal(model) is not None:
        return None
    if stream not in STREAMS:
        raise ValueError(f"fast_decode.stream must be one of {STREAMS}, not {stream!r}")
    vectors = torch.bfloat16 if stream == "bfloat16" else torch.float32
    return LeanLlama(base_model(model), copy_weights(model, dtype, vectors=vectors), dtype)


class LeanLlama:
    """The Llama forward of ``build``: ``prefill`` once per rollout, then ``step`` per new token."""

    def __init__(self, base: nn.Module, weights: Weights, dtype: torch.dtype):
        config = base.config
        self.weights, self.dtype = weights, dtype
        self.layers, self.lm_head, self.final_norm = weights.layers, weights.lm_head, weights.final_norm
        self.embed = base.model.embed_tokens.weight.detach()  # [V, D] master weights: a lookup needs no copy
        self.device = self.embed.device
        self._linear = packed_linear if packs_bf16(dtype, self.device) else F.linear
        self.eps = config.rms_norm_eps
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        rotary = base.model.rotary_emb
        self.inv_freq = rotary.inv_freq.detach().float()  # [Dh / 2]
        self.rope_scale = float(rotary.attention_scaling)
        self._length = 0
        self._cos = self._sin = self._keys = self._values = None  # made by the first prefill, kept while they fit
        mode = step_mode if step_mode != "auto" else ("graph" if self.device.type == "cuda" else "dynamic")
        if mode not in STEP_MODES:
            raise ValueError(f"step_mode must be one of {STEP_MODES}, not {mode!r}")
        self.mode = "static" if mode == "graph" and _GRAPH_FAILURE else mode
        self.fallback = "" if self.mode == mode else f"an earlier capture in this process failed ({_GRAPH_FAILURE[0]})"
        """Why this decoder steps eagerly where it was to replay a graph ("" when it did not fall back)."""
        self._loop: object = None
        """The static step's sampling loop with its CUDA graphs (``static_decode.loop_for``), kept for the next rollout
        of the same shapes; None for the dynamic step and after anything its graphs read was replaced."""
        self.version = weights_version(base)
        """``weight_copy.weights_version`` of the model when its weights were last copied."""
        self.stream = weights.final_norm.dtype
        """The residual stream's dtype (``stream`` when built): the norms', the rotation's and the residual's."""
        if self.stream != torch.float32 and not (self.dtype == self.stream == self.kv_dtype):
            raise ValueError(
                f"fast_decode.stream = 'bfloat16' needs a bfloat16 weight copy whose static step has a bfloat16 KV "
                f"cache; this decoder has {self.dtype} weights, a {self.kv_dtype} cache and step mode {self.mode!r}. "
                "Set fast_decode.stream = 'float32' (the default), or build in bfloat16 with step_mode 'static' or "
                "'graph' and kv_cache 'bfloat16' ('auto' picks it on CUDA)")

    def refresh(self, model: nn.Module) -> None:
        """Copy the current weights of ``model`` (the model this decoder was built on) into this decoder's buffers
        in place (``weight_copy.copy_weights``): a CUDA graph captured on them reads the new weights. An embedding
        table the model replaced (a new tensor, not changed in place) is read from its new place, and the graph is
        captured again."""
        base = base_model(model)
        copy_weights(model, self.dtype, into=self.weights)
        embed = base.model.embed_tokens.weight.detach()
        if embed.data_ptr() != self.embed.data_ptr():
            self.embed, self._loop = embed, None
        self.version = weights_version(base)

    def serves(self, model: nn.Module) -> bool:
        """Whether ``refresh`` can bring this decoder up to date with ``model`` (the model it was built on): the
        lean path still takes the model (no adapter it cannot merge was added since), on this decoder's device."""
        return refusal(model) is None and base_model(model).model.embed_tokens.weight.device == self.device

    @property
    def held_bytes(self) -> int:
        """The bytes of the KV cache this decoder keeps between rollouts (reused by a rollout of the same shape)."""
        return sum(t.numel() * t.element_size() for t in (self._keys, self._values) if t is not None)

    def _rope_tables(self, positions: int) -> bool:
        """Rotary tables [positions, Dh] covering positions 0 .. positions - 1: the last rollout's where they do
        (returns True: kept), else new ones (False)."""
        if self._cos is not None and self._cos.shape[0] >= positions:
            return True
        angles = (torch.arange(positions, dtype=torch.float32, device=self.device)[:, None]
                  * self.inv_freq.to(self.device))  # [positions, Dh / 2]
        cos, sin = angles.cos() * self.rope_scale, angles.sin() * self.rope_scale
        self._cos = torch.cat([cos, cos], dim=1).to(self.stream)  # [positions, Dh]
        self._sin = torch.cat([-sin, sin], dim=1).to(self.stream)
        half = self.head_dim // 2  # _swap[i, j] = 1 where i = j + Dh/2 (mod Dh): x @ _swap is rotate_half's x
        self._swap = torch.eye(self.head_dim, device=self.device).roll(half, dims=0).to(self.stream)
        return False

    def _kept_cache(self, shape: tuple[int, ...], static: bool) -> bool:
        """Whether the last rollout's KV cache serves a cache of ``shape`` [layers, B, Hkv, L, Dh] in ``kv_dtype``:
        the same shape for the static step (a graph reads all of it), the same rows and at least L slots for the
        dynamic step (it reads the written slice). Where it does not, it is let go before the new one is allocated."""
        kept = self._keys
        fits = kept is not None and kept.dtype == self.kv_dtype and (kept.shape == shape if static else
                                     kept.shape[:3] == shape[:3] and kept.shape[3] >= shape[3])
        if not fits:
            self._keys = self._values = None
        return fits

    def _prompt_pass(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The prompts ids [P, Lp] forwarded once: their last logits [P, V] and their keys and values [layers, P,
        Hkv, Lp, Dh] (in a cache of their own; the decoding cache is put back)."""
        prompts, width = ids.shape
        on = {"device": self.device}
        decoding = self._keys, self._values
        shape = (len(self.layers), prompts, self.kv_heads, width, self.head_dim)
        self._keys, self._values = torch.empty(shape, **on), torch.empty(shape, **on)  # the prompts' cache, float32
        causal = torch.ones((width, width), dtype=torch.bool, **on).tril()
        allowed = (causal & mask.bool()[:, None, :]) | torch.eye(width, dtype=torch.bool, **on)  # [P, Lp, Lp]
        bias = torch.zeros((prompts, 1, width, width), **on).masked_fill(~allowed[:, None], float("-inf"))
        group = self.heads // self.kv_heads  # query rows are ordered (group member, position)
        bias = bias.repeat(1, self.kv_heads, group, 1).flatten(0, 1)  # [P Hkv, group Lp, Lp]
        logits = self._forward(ids, positions, 0, bias)
        prompt_keys, prompt_values = self._keys, self._values
        self._keys, self._values = decoding
        return logits, prompt_keys, prompt_values

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, copies: int = 1) -> torch.Tensor:
        """Run the prompts ids [P, Lp] (left-padded, mask [P, Lp]) once each, then give every prompt
        ``copies`` adjacent rows (B = P copies) in a cache allocated for ``max_new_tokens`` more tokens.
        Returns the last position's logits [B, V] in float32. The rotary tables, the KV cache and the static
        step's inputs of the last rollout are reused where they fit (``_kept_cache``), written in place: a CUDA
        graph captured on them is replayed again, and captured anew only when rows or capacity changed."""
        prompts, width = ids.shape
        rows, capacity = prompts * copies, width + max_new_tokens
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # [P, Lp]
        on = {"device": self.device}
        static = self.mode != "dynamic"
        # The static step indexes the rotary tables by device positions: they cover every position a row can reach.
        rope_kept = self._rope_tables(capacity + 1 if static else int(positions.max()) + max_new_tokens + 1)
        shape = (len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
        cache_kept = self._kept_cache(shape, static)
        kept = rope_kept and cache_kept
        logits, prompt_keys, prompt_values = self._prompt_pass(ids, mask, positions)
        logits = logits.repeat_interleave(copies, dim=0)  # [B, V]
        if not cache_kept:
            # The static step reads every slot of its bucket (an unwritten one under a -inf bias): zeros, never
            # uninitialised NaNs; in ``kv_dtype`` (the prompts' cache stays float32).
            kv = {"device": self.device, "dtype": self.kv_dtype}
            self._keys, self._values = (torch.zeros(shape, **kv), torch.zeros(shape, **kv)) if static else (
                torch.empty(shape, **on), torch.empty(shape, **on))
        elif static:
            self._keys[..., width:, :] = 0.0
            self._values[..., width:, :] = 0.0
        self._keys[..., :width, :] = prompt_keys.repeat_interleave(copies, dim=1)
        self._values[..., :width, :] = prompt_values.repeat_interleave(copies, dim=1)
        # Unwritten slots: 0 for the dynamic step (it never reads past the written slice), -inf for the static one
        # (each step lifts its own slot to 0 before attending).
        valid = torch.cat([mask.bool(), mask.new_full((prompts, max_new_tokens), not static, dtype=torch.bool)], dim=1)
        key_bias = torch.zeros((prompts, 1, capacity), dtype=self._keys.dtype, **on).masked_fill(
            ~valid[:, None, :], float("-inf")).repeat_interleave(copies * self.kv_heads, dim=0)  # [B Hkv, 1, L]
        next_position = positions[:, -1:].repeat_interleave(copies, dim=0) + 1  # [B, 1]
        self._length = width
        if static and kept:  # the graph's inputs keep their addresses: written in place
            self._key_bias.copy_(key_bias)
            self._next_position.copy_(next_position)
            self._slot.fill_(width)
        else:
            self._key_bias, self._next_position = key_bias, next_position
        if static and not kept:  # the static step's inputs, read and advanced in place by every step (and replays)
            self._slot = torch.full((1,), width, dtype=torch.long, **on)
            self._token = torch.zeros(rows, dtype=torch.long, **on)
            self._loop = None  # new inputs: the graphs of the last rollout's loop read the old ones
        return logits

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Append one token per row (token [B]); returns the next logits [B, V] in float32. The dynamic step only:
        the static one samples inside the step (``static_decode``)."""
        if self.mode != "dynamic":
            raise ValueError(f"step() is the dynamic step's; a {self.mode!r} decoder runs static_decode.StaticDecode")
        start = self._length
        self._length += 1
        position = self._next_position
        self._next_position = position + 1
        return self._forward(token[:, None], position, start, self._key_bias[..., : start + 1])

    @property
    def kv_dtype(self) -> torch.dtype:
        """The rows' KV cache dtype: float32 for the dynamic step; for the static one, ``kv_cache``'s choice."""
        if kv_cache not in KV_CACHES:
            raise ValueError(f"kv_cache must be one of {KV_CACHES}, not {kv_cache!r}")
        if self.mode == "dynamic" or kv_cache == "float32":
            return torch.float32
        if kv_cache == "bfloat16":
            return torch.bfloat16
        return torch.bfloat16 if self.device.type == "cuda" and self.dtype == torch.bfloat16 else torch.float32

    def bucket_end(self, slots: int) -> int:
        """How many cache slots the static step attends over when ``slots`` are written: ``slots`` rounded up to a
        multiple of ``bucket_slots``, capped at the capacity (the capacity when ``bucket_slots`` is 0)."""
        capacity = self._keys.shape[3]
        return capacity if bucket_slots <= 0 else min(capacity, -(-slots // bucket_slots) * bucket_slots)

    def static_step(self, end: int) -> torch.Tensor:
        """One decoding step on shapes fixed for its bucket: the token ``_token`` [B] at the positions
        ``_next_position`` [B, 1] into cache slot ``_slot`` [1] (device tensors), attending over the cache's first
        ``end`` slots (``bucket_end``) under ``_key_bias``; advances the position and the slot in place. Returns the
        logits [B, V] in float32: the dynamic step's (the unwritten slots weigh exp(-inf) = 0), up to the kernels'
        summation order."""
        self._key_bias.index_fill_(-1, self._slot, 0.0)
        logits = self._forward(self._token[:, None], self._next_position, self._slot, self._key_bias[..., :end])
        self._next_position.add_(1)
        self._slot.add_(1)
        return logits

    @property
    def path(self) -> str:
        """How this decoder stepped (``SAMPLER_PATHS``): "lean graph" (a CUDA graph replayed), "lean static" (the
        static step run eagerly), "lean dynamic" (the CPU's step). Read after a rollout: a failed capture turns
        "lean graph" into "lean static" and sets ``fallback``."""
        return f"lean {self.mode}"

    def _rope(self, x: torch.Tensor, rope: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """transformers' ``x cos + rotate_half(x) sin`` on x [B, S, heads, Dh], with the sign of rotate_half in the
        sin table; ``rope``: (cos, sin) [B, S, 1, Dh], or (the rotation matrices [B, Dh, Dh],) for S = 1."""
        if len(rope) == 1:  # one matmul: x @ (diag(cos) + _swap sin), summed in float32 and rounded once
            rows, length, heads, size = x.shape
            return torch.bmm(x.reshape(rows, heads, size), rope[0]).view(rows, length, heads, size)
        cos, sin = rope
        first, second = x.chunk(2, dim=-1)
        return torch.addcmul(x * cos, torch.cat([second, first], dim=-1), sin)

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The rotary embedding of ``positions`` [B, S] as ``_rope`` takes it: the cos and sin tables' rows [B, S, 1,
        Dh]; for a bfloat16 stream's decoding step (S = 1), one rotation matrix a row, [B, Dh, Dh], built once a step
        so that each layer rotates its queries and keys in one matmul instead of three operations."""
        cos, sin = self._cos[positions][:, :, None], self._sin[positions][:, :, None]
        if positions.shape[1] != 1 or self.stream == torch.float32:
            return cos, sin
        cos, sin = cos.flatten(1), sin.flatten(1)  # [B, Dh]
        return (torch.addcmul(torch.diag_embed(cos), self._swap, sin[:, None, :]),)

    def _attention(self, index: int, normed: torch.Tensor, shape: tuple[int, int], start: int | torch.Tensor,
                   rope: tuple[torch.Tensor, ...], bias: torch.Tensor) -> torch.Tensor:
        """Self-attention of layer ``index`` on normed [B S, D]; writes the cache at slots ``start`` .. (an int, or
        a device tensor [1] with S = 1) and attends over its first ``bias.shape[-1]`` slots (``rope``: ``_rotary``'s);
        returns [B S, H Dh].
        A bfloat16 cache (the static step's, ``kv_dtype``) runs ``scaled_dot_product_attention`` on bfloat16
        queries, keys and values."""
        rows, length = shape
        group = self.heads // self.kv_heads
        layer = self.layers[index]
        cache = self._keys.dtype
        qkv_bias = layer.qkv_bias  # in the stream's dtype: a bfloat16 stream's is added by the matmul
        fused = qkv_bias is not None and self.stream != torch.float32
        projected = self._linear(normed, layer.qkv, qkv_bias if fused else None).view(rows, length, -1, self.head_dim)
        qkv = projected.to(self.stream)
        if qkv_bias is not None and not fused:
            qkv = qkv + qkv_bias.view(-1, self.head_dim)
        qk = qkv[:, :, : self.heads + self.kv_heads]  # [B, S, H + Hkv, Dh]
        if layer.qk_norm is not None:  # each head normed over Dh, then its q or k weight (queries pre-scaled)
            qk = F.rms_norm(qk, (self.head_dim,), eps=self.eps) * layer.qk_norm
        qk = self._rope(qk, rope).to(cache)  # one rotation, one cast for queries and keys
        # without a float32 bias the values are the projection's own: a cast to float32 and back gives them bit for bit
        values = projected if (qkv_bias is None or fused) and projected.dtype == cache else qkv.to(cache)
        keys = qk[:, :, self.heads :].transpose(1, 2)  # [B, Hkv, S, Dh]
        values = values[:, :, self.heads + self.kv_heads :].transpose(1, 2)
        if isinstance(start, torch.Tensor):
            self._keys[index].index_copy_(2, start, keys)
            self._values[index].index_copy_(2, start, values)
        else:
            self._keys[index, :, :, start : start + length] = keys
            self._values[index, :, :, start : start + length] = values
        end = bias.shape[-1]
        q = qk[:, :, : self.heads].transpose(1, 2).reshape(rows, self.kv_heads, group * length, self.head_dim)
        keys, values = self._keys[index, :, :, :end], self._values[index, :, :, :end]  # [B, Hkv, end, Dh]
        if cache == torch.float32:  # queries pre-scaled; [B Hkv, group S, end] scores
            scores = torch.baddbmm(bias, q.flatten(0, 1), keys.flatten(0, 1).transpose(1, 2))
            attended = torch.bmm(torch.softmax(scores, dim=-1), values.flatten(0, 1))
        else:  # 4-D, as the fused kernels take it; the float32 softmax runs inside the kernel. The output stays in
            # the cache dtype: the caller casts it to the weights' dtype (bfloat16 -> float32 -> bfloat16 was a no-op)
            mask = bias.unflatten(0, (rows, self.kv_heads))  # [B, Hkv, group S or 1, end]
            attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1.0)
        return attended.reshape(rows, self.heads, length, self.head_dim).transpose(1, 2).reshape(rows * length, -1)

    def _plus_linear(self, hidden: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The residual ``hidden`` [N, D] plus x [N, in] times ``weight`` [D, in] transposed: a float32 stream adds
        the matmul's output in place; a stream in the weights' dtype has the matmul add it (``addmm_`` in place, or
        oneDNN's fused add on a prepacked weight), one operation instead of two, rounded once."""
        if hidden.dtype != x.dtype:
            return hidden.add_(self._linear(x, weight))  # float32 += dtype
        if self._linear is packed_linear:
            return torch.ops.mkldnn._linear_pointwise.binary(x, hidden, weight, None, "add")
        return hidden.addmm_(x, weight.t())

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int | torch.Tensor,
                 bias: torch.Tensor) -> torch.Tensor:
        """ids, positions [B, S] written at cache slots start .. start + S - 1 (``start`` a device tensor: see
        ``_attention``); bias [B Hkv, group S or 1, start + S or L], added to the attention scores.
        Every matmul takes a 2-D [B S, in] input (a 3-D one runs slower on this CPU's kernels)."""
        rows, length = ids.shape
        hidden = F.embedding(ids.reshape(-1), self.embed).to(self.stream)  # [B S, D], the residual stream
        rope = self._rotary(positions)
        width = (hidden.shape[-1],)
        for index, layer in enumerate(self.layers):
            normed = F.rms_norm(hidden, width, layer.attn_norm, self.eps).to(self.dtype)
            attended = self._attention(index, normed, (rows, length), start, rope, bias).to(self.dtype)
            hidden = self._plus_linear(hidden, attended, layer.out)
            normed = F.rms_norm(hidden, width, layer.mlp_norm, self.eps).to(self.dtype)
            gate, up = self._linear(normed, layer.gate_up).chunk(2, dim=-1)
            hidden = self._plus_linear(hidden, F.silu(gate) * up, layer.down)
        last = hidden.view(rows, length, -1)[:, -1]
        last = F.rms_norm(last, width, self.final_norm, self.eps).to(self.dtype)
        return self._linear(last, self.lm_head).float()  # [B, V]
