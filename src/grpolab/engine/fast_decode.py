"""A lean decoder for Llama-family models: the forward pass of ``LlamaForCausalLM`` written as a plain
loop over layers on copies of the weights, with a preallocated KV cache. ``rollout.sample`` uses it
for every model it accepts and falls back to the transformers forward for the rest.

Shapes: B rows (left-padded), Lp prompt tokens, S tokens in one forward (Lp in the prefill, 1 per
decode step), L = Lp + T cache slots, D hidden size, H query heads, Hkv key/value heads, Dh head size.

How it departs from transformers' ``LlamaForCausalLM`` forward (the reference it is tested against):

* The weights are copied once per rollout into ``dtype`` (``build``'s default bfloat16: this CPU's
  AVX-512 BF16 matmul ran 2x float32's rate, 176 vs 87 GFLOP/s at [32 x 576] . [576 x 1536], in
  benchmarks/bench_engine.py; ``preferred_dtype`` picks per model), with q/k/v fused into one matrix
  and gate/up into another, so a layer is four matmuls. The master weights are not touched. peft LoRA
  adapters are merged into the copy (``W + B A * scaling``), so LoRA adds no per-token cost.
* The residual stream, the RMS norms, the rotary embedding, the KV cache and the attention stay in
  float32; only the weight matmuls' inputs and outputs are in ``dtype`` (transformers in bfloat16 runs
  all of it in bfloat16). Attention over a short cache is a handful of tiny matmuls, faster in float32
  on this CPU than bfloat16 or ``scaled_dot_product_attention``'s kernel. Logits are
  returned in float32 (computed by a bfloat16 matmul, so they carry its rounding).
* In bfloat16 the matrices are handed to oneDNN prepacked (``torch.ops.mkldnn._reorder_linear_weight``,
  the layout ``torch.compile``'s CPU freezing uses), so a decode step does not re-layout every weight;
  where oneDNN has no bfloat16 kernel, plain ``F.linear`` runs instead.
* The KV cache is two preallocated tensors [layers, B, Hkv, L, Dh]; the attention mask is built once
  per rollout. The prefill runs each distinct prompt once and copies its cache to the G rows that
  sample from it (G times less prefill arithmetic; each row's values are those of a prefill of all B
  rows, up to the matmul kernels' rounding).
  A padding query attends to itself, so no softmax row is empty (its output is never used).
* Grouped-query attention groups the queries of a key/value head along the query axis instead of
  repeating the keys and values.

Devices: the copy, the cache and every table live on the device of the model's weights. On a GPU the matrices
are plain bfloat16 (or float32) tensors run by ``F.linear``; the oneDNN prepacking is the CPU's alone.

Accepted: ``LlamaForCausalLM`` (bare or wrapped by peft with plain LoRA on linear layers), SiLU MLP,
no biases, static rotary scaling (default, linear, llama3). Anything else returns None from ``build``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BF16_MIN_HIDDEN", "LeanLlama", "build", "preferred_dtype"]

_ROPE_TYPES = ("default", "linear", "llama3")
BF16_MIN_HIDDEN = 512
"""Hidden size from which ``preferred_dtype`` picks bfloat16. Measured, one thread: SmolLM2 (576) samples
1.7x faster in bfloat16 than float32; the embedded model (128) 15% slower, its matmuls being too small
for the bfloat16 kernels to pay for their call overhead."""
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class _Layer:
    """One decoder layer's weights: norms in float32, matrices in the compute dtype."""

    attn_norm: torch.Tensor  # [D]
    qkv: torch.Tensor  # [(H + 2 Hkv) Dh, D]
    out: torch.Tensor  # [D, H Dh]
    mlp_norm: torch.Tensor  # [D]
    gate_up: torch.Tensor  # [2 I, D]
    down: torch.Tensor  # [D, I]


def _base_model(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _effective_weight(module: nn.Module) -> torch.Tensor | None:
    """The weight a linear layer applies: its own, or a LoRA layer's base weight plus its active,
    unmerged adapters. None for anything else (biases, LoRA variants such as DoRA, other adapters)."""
    if type(module) is nn.Linear:
        return module.weight if module.bias is None else None
    base = getattr(module, "base_layer", None)
    if type(base) is not nn.Linear or base.bias is not None or not hasattr(module, "lora_A"):
        return None
    weight = base.weight
    if module.disable_adapters or module.merged:
        return weight
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if module.lora_variant.get(name) is not None or module.lora_bias.get(name):
            return None
        weight = weight + module.get_delta_weight(name)
    return weight


def _supported(base: nn.Module) -> bool:
    config = getattr(base, "config", None)
    if type(base).__name__ != "LlamaForCausalLM" or config is None:
        return False
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    return (config.hidden_act == "silu" and not config.attention_bias and not config.mlp_bias
            and rope in _ROPE_TYPES and type(base.model.embed_tokens) is nn.Embedding)


def _packs_bf16(dtype: torch.dtype, device: torch.device) -> bool:
    mkldnn = torch.ops.mkldnn
    return (dtype == torch.bfloat16 and device.type == "cpu" and torch.backends.mkldnn.is_available()
            and hasattr(mkldnn, "_reorder_linear_weight") and bool(mkldnn._is_mkldnn_bf16_supported()))


def _matrix(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``weight`` [out, in] in ``dtype``, prepacked for oneDNN where ``_packs_bf16``."""
    weight = weight.detach().to(dtype)
    return (torch.ops.mkldnn._reorder_linear_weight(weight, batch_size=32) if _packs_bf16(dtype, weight.device)
            else weight)


def _packed_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def _layer_weights(layer: nn.Module, dtype: torch.dtype, query_scale: float) -> _Layer | None:
    attn, mlp = layer.self_attn, layer.mlp
    modules = [getattr(attn, n) for n in _PROJECTIONS[:4]] + [getattr(mlp, n) for n in _PROJECTIONS[4:]]
    weights = [_effective_weight(m) for m in modules]
    if any(w is None for w in weights):
        return None
    q, k, v, o, gate, up, down = weights
    qkv = torch.cat([q * query_scale, k, v])  # the attention's 1 / sqrt(Dh) folded into the queries
    return _Layer(layer.input_layernorm.weight.detach().float(), _matrix(qkv, dtype),
                  _matrix(o, dtype), layer.post_attention_layernorm.weight.detach().float(),
                  _matrix(torch.cat([gate, up]), dtype), _matrix(down, dtype))


def preferred_dtype(model: nn.Module) -> torch.dtype:
    """bfloat16 for models with hidden size >= ``BF16_MIN_HIDDEN``, else float32."""
    hidden = getattr(getattr(_base_model(model), "config", None), "hidden_size", 0) or 0
    return torch.bfloat16 if hidden >= BF16_MIN_HIDDEN else torch.float32


def build(model: nn.Module, dtype: torch.dtype = torch.bfloat16) -> LeanLlama | None:
    """A ``LeanLlama`` on the current weights of ``model`` in ``dtype``, or None if the lean path does not
    accept the model (see the module docstring)."""
    base = _base_model(model)
    if not _supported(base):
        return None
    with torch.no_grad():
        config = base.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        layers = [_layer_weights(layer, dtype, head_dim**-0.5) for layer in base.model.layers]
        head = _effective_weight(base.lm_head)
        if head is None or any(layer is None for layer in layers):
            return None
        return LeanLlama(base, layers, _matrix(head, dtype), dtype)


class LeanLlama:
    """The Llama forward of ``build``: ``prefill`` once per rollout, then ``step`` per new token."""

    def __init__(self, base: nn.Module, layers: list[_Layer], lm_head: torch.Tensor, dtype: torch.dtype):
        config = base.config
        self.layers, self.lm_head, self.dtype = layers, lm_head, dtype
        self.embed = base.model.embed_tokens.weight.detach()  # [V, D] master weights: a lookup needs no copy
        self.device = self.embed.device
        self._linear = _packed_linear if _packs_bf16(dtype, self.device) else F.linear
        self.final_norm = base.model.norm.weight.detach().float()
        self.eps = config.rms_norm_eps
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        rotary = base.model.rotary_emb
        self.inv_freq = rotary.inv_freq.detach().float()  # [Dh / 2]
        self.rope_scale = float(rotary.attention_scaling)
        self._length = 0

    def _rope_tables(self, positions: int) -> None:
        angles = (torch.arange(positions, dtype=torch.float32, device=self.device)[:, None]
                  * self.inv_freq.to(self.device))  # [positions, Dh / 2]
        cos, sin = angles.cos() * self.rope_scale, angles.sin() * self.rope_scale
        self._cos, self._sin = torch.cat([cos, cos], dim=1), torch.cat([-sin, sin], dim=1)  # [positions, Dh]

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, copies: int = 1) -> torch.Tensor:
        """Run the prompts ids [P, Lp] (left-padded, mask [P, Lp]) once each, then give every prompt
        ``copies`` adjacent rows (B = P copies) in a cache allocated for ``max_new_tokens`` more tokens.
        Returns the last position's logits [B, V] in float32."""
        prompts, width = ids.shape
        rows, capacity = prompts * copies, width + max_new_tokens
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # [P, Lp]
        self._rope_tables(int(positions.max()) + max_new_tokens + 1)
        shape = (len(self.layers), prompts, self.kv_heads, width, self.head_dim)
        on = {"device": self.device}
        self._keys, self._values = torch.empty(shape, **on), torch.empty(shape, **on)  # the prompts' cache, float32
        causal = torch.ones((width, width), dtype=torch.bool, **on).tril()
        allowed = (causal & mask.bool()[:, None, :]) | torch.eye(width, dtype=torch.bool, **on)  # [P, Lp, Lp]
        bias = torch.zeros((prompts, 1, width, width), **on).masked_fill(~allowed[:, None], float("-inf"))
        group = self.heads // self.kv_heads  # query rows are ordered (group member, position)
        bias = bias.repeat(1, self.kv_heads, group, 1).flatten(0, 1)  # [P Hkv, group Lp, Lp]
        logits = self._forward(ids, positions, 0, bias).repeat_interleave(copies, dim=0)  # [B, V]
        prompt_keys, prompt_values = self._keys, self._values
        shape = (len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
        self._keys, self._values = torch.empty(shape, **on), torch.empty(shape, **on)
        self._keys[..., :width, :] = prompt_keys.repeat_interleave(copies, dim=1)
        self._values[..., :width, :] = prompt_values.repeat_interleave(copies, dim=1)
        valid = torch.cat([mask.bool(), mask.new_ones((prompts, max_new_tokens), dtype=torch.bool)], dim=1)
        self._key_bias = torch.zeros((prompts, 1, capacity), **on).masked_fill(
            ~valid[:, None, :], float("-inf")).repeat_interleave(copies * self.kv_heads, dim=0)  # [B Hkv, 1, L]
        self._next_position = positions[:, -1:].repeat_interleave(copies, dim=0) + 1  # [B, 1]
        self._length = width
        return logits

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Append one token per row (token [B]); returns the next logits [B, V] in float32."""
        start = self._length
        self._length += 1
        position = self._next_position
        self._next_position = position + 1
        return self._forward(token[:, None], position, start, self._key_bias[..., : start + 1])

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """transformers' ``x cos + rotate_half(x) sin`` with the sign of rotate_half in the sin table."""
        first, second = x.chunk(2, dim=-1)
        return torch.addcmul(x * cos, torch.cat([second, first], dim=-1), sin)

    def _attention(self, index: int, normed: torch.Tensor, shape: tuple[int, int], start: int,
                   cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Self-attention of layer ``index`` on normed [B S, D]; writes the cache; returns [B S, H Dh]."""
        rows, length = shape
        end, group = start + length, self.heads // self.kv_heads
        qkv = self._linear(normed, self.layers[index].qkv).float().view(rows, length, -1, self.head_dim)
        qk = self._rope(qkv[:, :, : self.heads + self.kv_heads], cos, sin)  # [B, S, H + Hkv, Dh], one rotation
        self._keys[index, :, :, start:end] = qk[:, :, self.heads :].transpose(1, 2)
        self._values[index, :, :, start:end] = qkv[:, :, self.heads + self.kv_heads :].transpose(1, 2)
        q = qk[:, :, : self.heads].transpose(1, 2).reshape(rows * self.kv_heads, group * length, self.head_dim)
        keys = self._keys[index, :, :, :end].flatten(0, 1)  # [B Hkv, L, Dh]
        scores = torch.baddbmm(bias, q, keys.transpose(1, 2))  # [B Hkv, group S, L], queries pre-scaled
        attended = torch.bmm(torch.softmax(scores, dim=-1), self._values[index, :, :, :end].flatten(0, 1))
        return attended.view(rows, self.heads, length, self.head_dim).transpose(1, 2).reshape(rows * length, -1)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int, bias: torch.Tensor) -> torch.Tensor:
        """ids, positions [B, S] written at cache slots start .. start + S - 1; bias [B Hkv, group S or 1,
        start + S], added to the attention scores.
        Every matmul takes a 2-D [B S, in] input (a 3-D one runs slower on this CPU's kernels)."""
        rows, length = ids.shape
        hidden = F.embedding(ids.reshape(-1), self.embed).float()  # [B S, D], the residual stream
        cos, sin = self._cos[positions][:, :, None], self._sin[positions][:, :, None]  # [B, S, 1, Dh]
        width = (hidden.shape[-1],)
        for index, layer in enumerate(self.layers):
            normed = F.rms_norm(hidden, width, layer.attn_norm, self.eps).to(self.dtype)
            attended = self._attention(index, normed, (rows, length), start, cos, sin, bias).to(self.dtype)
            hidden.add_(self._linear(attended, layer.out))  # float32 += dtype
            normed = F.rms_norm(hidden, width, layer.mlp_norm, self.eps).to(self.dtype)
            gate, up = self._linear(normed, layer.gate_up).chunk(2, dim=-1)
            hidden.add_(self._linear(F.silu(gate) * up, layer.down))
        last = hidden.view(rows, length, -1)[:, -1]
        last = F.rms_norm(last, width, self.final_norm, self.eps).to(self.dtype)
        return self._linear(last, self.lm_head).float()  # [B, V]
