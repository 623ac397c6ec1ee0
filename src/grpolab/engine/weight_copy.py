"""The lean decoder's copy of a model's weights (``fast_decode``): written once when the decoder is built, then
rewritten in place from the model's current weights before each rollout (``refresh``), so that the buffers a
decoder reads, and on CUDA the graph captured on them, keep their addresses across rollouts.

Each matrix is written the same way both times: the float32 sum of its parts (q/k/v fused into one matrix,
gate/up into another; a LoRA layer's base weight plus each active adapter's ``B A * scaling``, added in place),
the attention's 1 / sqrt(Dh) folded into the queries, then converted to the compute dtype (and on the CPU in
bfloat16, prepacked for oneDNN and copied into the prepacked buffer). A refreshed copy is therefore the copy a
new decoder would make, bit for bit (``tests/engine/test_sampler_reuse.py``). The vectors (norm weights, Qwen2's
q/k/v bias) are copies in the decoder's residual-stream dtype (``fast_decode.stream``: float32 by default); the
embedding table is not copied (the lookup reads the model's own weight).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import nn

from grpolab.engine.families import PROJECTIONS, base_model, qkv_biased
from grpolab.engine.families import bias as linear_bias

__all__ = ["LayerWeights", "Weights", "copy_weights", "packed_linear", "packs_bf16", "weights_version"]


@dataclass
class LayerWeights:
    """One decoder layer's weights: vectors in the residual stream's dtype (float32 by default), matrices in the
    compute dtype."""

    attn_norm: torch.Tensor  # [D]
    qkv: torch.Tensor  # [(H + 2 Hkv) Dh, D]
    qkv_bias: torch.Tensor | None  # [(H + 2 Hkv) Dh] (Qwen2), else None
    qk_norm: torch.Tensor | None  # [H + Hkv, Dh]: each head's q or k RMSNorm weight (Qwen3), else None
    out: torch.Tensor  # [D, H Dh]
    mlp_norm: torch.Tensor  # [D]
    gate_up: torch.Tensor  # [2 I, D]
    down: torch.Tensor  # [D, I]


@dataclass
class Weights:
    """Every weight the lean decoder copies: its layers, the output head [V, D] and the final norm [D]."""

    layers: list[LayerWeights]
    lm_head: torch.Tensor
    final_norm: torch.Tensor


def packs_bf16(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether matrices in ``dtype`` on ``device`` are prepacked for oneDNN (bfloat16 on a CPU that has the kernel)."""
    mkldnn = torch.ops.mkldnn
    return (
        dtype == torch.bfloat16
        and device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and hasattr(mkldnn, "_reorder_linear_weight")
        and bool(mkldnn._is_mkldnn_bf16_supported())
    )


def packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] times a prepacked weight [out, in] transposed, plus ``bias`` [out] when given."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _base_weight(module: nn.Module) -> torch.Tensor:
    """The weight [out, in] of a linear layer that ``families.refusal`` accepts, or of a LoRA layer's base layer."""
    return module.weight if type(module) is nn.Linear else module.base_layer.weight


def _adapters(module: nn.Module) -> list[str]:
    """The adapters a LoRA layer applies on top of its base weight: its active ones, unless they are disabled or
    already merged into the base weight; none for a plain linear layer."""
    if type(module) is nn.Linear or module.disable_adapters or module.merged:
        return []
    return [name for name in module.active_adapters if name in module.lora_A]


def _stacked(
    modules: list[nn.Module], scales: list[float], dtype: torch.dtype, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The effective weights of ``modules`` stacked along their output axis [sum out, in], each times its scale, in
    ``dtype`` (plain layout), written into ``out`` when given. A part with adapters or a scale is summed in float32
    (the base weight plus each adapter's ``B A * scaling``, added in place, then scaled) and rounded once; a plain
    part is rounded straight from the model's weight (the same values, without the float32 pass)."""
    weights = [_base_weight(m) for m in modules]
    rows = [w.shape[0] for w in weights]
    if out is None:
        out = torch.empty((sum(rows), weights[0].shape[1]), dtype=dtype, device=weights[0].device)
    for part, weight, module, scale in zip(out.split(rows), weights, modules, scales, strict=True):
        adapters = _adapters(module)
        if not adapters and scale == 1.0:
            part.copy_(weight.detach())
            continue
        value = weight.detach().to(torch.float32, copy=True)
        for name in adapters:
            value.add_(module.get_delta_weight(name))
        part.copy_(value.mul_(scale))
    return out


def _matrix(
    modules: list[nn.Module], scales: list[float], dtype: torch.dtype, into: torch.Tensor | None
) -> torch.Tensor:
    """``_stacked`` in ``dtype``, prepacked where ``packs_bf16``: a new tensor, or written into ``into``."""
    if not packs_bf16(dtype, _base_weight(modules[0]).device):
        return _stacked(modules, scales, dtype, out=into)
    packed = torch.ops.mkldnn._reorder_linear_weight(_stacked(modules, scales, dtype), batch_size=32)
    return packed if into is None else into.copy_(packed)


def _vector(value: torch.Tensor, vectors: torch.dtype, into: torch.Tensor | None) -> torch.Tensor:
    """``value`` (computed in float32) in ``vectors``: a tensor of its own (never the model's), or written into
    ``into`` (in its own dtype)."""
    value = value.detach().float()
    if into is not None:
        return into.copy_(value)
    return value.clone() if vectors == torch.float32 else value.to(vectors)


def _layer(
    layer: nn.Module, dtypes: tuple[torch.dtype, torch.dtype], query_scale: float, biased: bool,
    into: LayerWeights | None,
) -> LayerWeights:
    """A layer ``refusal`` accepts, copied (into ``into``'s buffers when given). The attention's 1 / sqrt(Dh) is
    folded into the queries: into the q norm's weight where there is one (a norm undoes any scale put before it),
    else into the q projection. ``dtypes``: the matrices' and the vectors'."""
    dtype, vectors = dtypes
    attn, mlp = layer.self_attn, layer.mlp
    modules = [getattr(attn, n) for n in PROJECTIONS[:4]] + [getattr(mlp, n) for n in PROJECTIONS[4:]]
    old = {f.name: None if into is None else getattr(into, f.name) for f in fields(LayerWeights)}
    qk_norm, weight_scale = None, query_scale
    if hasattr(attn, "q_norm"):  # Qwen3: per-head RMSNorm on q and k, after the projection and before RoPE
        heads = _base_weight(modules[0]).shape[0] // attn.head_dim
        kv_heads = _base_weight(modules[1]).shape[0] // attn.head_dim
        qk_norm = _vector(
            torch.cat(
                [
                    (attn.q_norm.weight.detach().float() * query_scale).expand(heads, -1),
                    attn.k_norm.weight.detach().float().expand(kv_heads, -1),
                ]
            ),
            vectors,
            old["qk_norm"],
        )  # [H + Hkv, Dh]
        weight_scale = 1.0
    bias = None
    if biased:
        q_b, k_b, v_b = (linear_bias(m).detach().float() for m in modules[:3])
        bias = _vector(torch.cat([q_b * weight_scale, k_b, v_b]), vectors, old["qkv_bias"])
    return LayerWeights(
        _vector(layer.input_layernorm.weight, vectors, old["attn_norm"]),
        _matrix(modules[:3], [weight_scale, 1.0, 1.0], dtype, old["qkv"]),
        bias,
        qk_norm,
        _matrix(modules[3:4], [1.0], dtype, old["out"]),
        _vector(layer.post_attention_layernorm.weight, vectors, old["mlp_norm"]),
        _matrix(modules[4:6], [1.0, 1.0], dtype, old["gate_up"]),
        _matrix(modules[6:], [1.0], dtype, old["down"]),
    )


def copy_weights(
    model: nn.Module, dtype: torch.dtype, into: Weights | None = None, vectors: torch.dtype = torch.float32
) -> Weights:
    """The weights of ``model`` (bare or under peft; one ``refusal`` accepts) as the lean decoder reads them, the
    matrices in ``dtype`` and the vectors in ``vectors``: new tensors, or, given ``into`` (an earlier copy of the
    same model in the same dtypes), written into its buffers in place and returned."""
    base = base_model(model)
    config = base.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    biased = qkv_biased(config)
    with torch.no_grad():
        layers = [
            _layer(layer, (dtype, vectors), head_dim**-0.5, biased, None if into is None else into.layers[index])
            for index, layer in enumerate(base.model.layers)
        ]
        return Weights(
            layers,
            _matrix([base.lm_head], [1.0], dtype, None if into is None else into.lm_head),
            _vector(base.model.norm.weight, vectors, None if into is None else into.final_norm),
        )


def weights_version(model: nn.Module) -> tuple[tuple[int, int], ...]:
    """Where each parameter of ``model`` lives and how many times it was changed in place through torch's autograd
    tensors (``Tensor._version``): it moves with a non-fused optimizer step, ``copy_``, ``load_state_dict`` and a
    replaced ``.data``, but not with torch's fused AdamW (which leaves the counter alone) nor a change made through
    ``.data``; a guard, not a proof that the weights are unchanged."""
    return tuple((p.data_ptr(), p._version) for p in base_model(model).parameters())
