"""A lean training forward for Llama-family models: the logits of ``LlamaForCausalLM`` with autograd,
computed by calling the model's own submodules in a plain loop. ``rollout.token_logprobs`` uses it for
every model it accepts and falls back to the transformers forward for the rest.

Shapes: B rows (left-padded prompt, right-padded completion), S tokens, K kept positions, D hidden
size, H query heads, Hkv key/value heads, Dh head size, V vocabulary.

How it departs from transformers' ``LlamaForCausalLM`` forward (the reference it is tested against):

* It calls ``embed_tokens``, each layer's ``input_layernorm``, ``q_proj`` / ``k_proj`` / ``v_proj`` /
  ``o_proj``, ``post_attention_layernorm``, ``gate_proj`` / ``up_proj`` / ``down_proj``, the final
  ``norm``, ``rotary_emb`` and ``lm_head`` directly, so peft LoRA wrappers on any of them run unchanged
  and gradients reach whichever parameters train (full fine-tuning or adapters). What it skips is the
  per-call Python of the decoder stack: the masking utilities, the attention dispatch, the output
  dataclasses and the kwargs plumbing.
* Two shortcuts where the module is the stock one (forward hooks on it then do not run): projections
  that are all plain ``nn.Linear`` (q/k/v, gate/up) run as one matmul on their concatenated weights
  (the gradient splits back through the concatenation), and a float32 ``LlamaRMSNorm`` runs as the
  fused ``F.rms_norm`` on its own weight.
* The rotary tables come from the model's ``rotary_emb`` once per call and rotate queries and keys
  together. Attention is ``scaled_dot_product_attention`` (``enable_gqa`` for grouped-query models)
  with one boolean mask [B, 1, S, S], causal and key padding, built once per call. A left-padding
  query attends to itself, so no softmax row is empty; transformers gives such positions other values,
  and neither is used.
* Only the last K positions go through the final norm and ``lm_head`` (``logits_to_keep``).

What it buys on the embedded model (hidden 128, one thread): 7-10% off a forward + backward at 8 rows
x 18 tokens. The rest is arithmetic: a lone matmul of these shapes runs at 85-88 GFLOP/s, this CPU's
float32 rate (``training_step`` also forwards only the columns the trained rows use).

Accepted: what ``fast_decode`` accepts (``LlamaForCausalLM``, bare or under peft; SiLU MLP, no biases)
with no attention dropout, and every projection (and ``lm_head``) a plain ``nn.Linear`` or a peft LoRA
layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from grpolab.engine import families

__all__ = ["head", "hidden_states", "logits", "supports"]

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def _linear_like(module: nn.Module) -> bool:
    """A bias-free ``nn.Linear``, or a peft layer wrapping one (its adapters run as they are)."""
    if type(module) is nn.Linear:
        return module.bias is None
    base = getattr(module, "base_layer", None)
    return type(base) is nn.Linear and base.bias is None and hasattr(module, "lora_A")


def supports(model: nn.Module) -> bool:
    """Whether ``logits`` accepts ``model`` (see the module docstring)."""
    base = families.base_model(model)
    if not families.lean_forward_takes(base) or getattr(base.config, "attention_dropout", 0.0):
        return False
    modules = [base.lm_head]
    for layer in base.model.layers:
        modules += [getattr(layer.self_attn, n) for n in _ATTENTION] + [getattr(layer.mlp, n) for n in _MLP]
    return all(_linear_like(m) for m in modules)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, S, heads, Dh] rotated as transformers' ``apply_rotary_pos_emb`` does; cos, sin [B, S, 1, Dh]."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


def _norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)``; a ``LlamaRMSNorm`` runs as the fused ``F.rms_norm`` on its own weight."""
    if type(module).__name__ == "LlamaRMSNorm" and x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), module.weight, module.variance_epsilon)
    return module(x)


def _mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, 1, S, S] True where a query may attend: causal and valid keys; a query before the row's first
    valid token (left padding) attends to itself only, so that its softmax row is not empty."""
    width, valid = attention_mask.shape[1], attention_mask.bool()
    causal = torch.ones((width, width), dtype=torch.bool, device=attention_mask.device).tril()
    allowed = causal & valid[:, None, :]
    leading = valid.cumsum(dim=1) == 0  # [B, S] left padding
    allowed |= torch.diag_embed(leading)
    return allowed[:, None]


def _projections(x: torch.Tensor, *modules: nn.Module) -> torch.Tensor:
    """The modules' outputs on x [B, S, D], concatenated along the last axis: one matmul on the
    concatenated weights when all are plain ``nn.Linear`` (the gradient splits back through the
    concatenation), else one call per module (a peft LoRA layer runs its adapters)."""
    if all(type(m) is nn.Linear for m in modules):
        return F.linear(x, torch.cat([m.weight for m in modules]))
    return torch.cat([m(x) for m in modules], dim=-1)


def _attention(attn: nn.Module, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               mask: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """One layer's self-attention on normed [B, S, D]; returns o_proj's output [B, S, D]."""
    rows, length, _ = normed.shape
    qkv = _projections(normed, attn.q_proj, attn.k_proj, attn.v_proj).view(rows, length, -1, head_dim)
    kv_heads = (qkv.shape[2] - heads) // 2
    qk = _rotate(qkv[:, :, : heads + kv_heads], cos, sin)  # [B, S, H + Hkv, Dh], one rotation
    q, k = qk[:, :, :heads].transpose(1, 2), qk[:, :, heads:].transpose(1, 2)
    v = qkv[:, :, heads + kv_heads :].transpose(1, 2)  # [B, Hkv, S, Dh]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=head_dim**-0.5,
                                         enable_gqa=kv_heads != heads)
    return attn.o_proj(out.transpose(1, 2).reshape(rows, length, -1))


def hidden_states(model: nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
    """The decoder stack's output [B, S, D] (before the final norm) on input_ids [B, S] at position_ids
    [B, S], with autograd; mask [B, 1, S, S] is True where a query may attend to a key (every query row
    must allow at least one key). Call only if ``supports(model)``."""
    base = families.base_model(model)
    inner, config = base.model, base.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    hidden = inner.embed_tokens(input_ids)  # [B, S, D]
    cos, sin = inner.rotary_emb(hidden, position_ids)  # [B, S, Dh] each, in the hidden dtype
    cos, sin = cos[:, :, None], sin[:, :, None]
    heads = config.num_attention_heads
    for layer in inner.layers:
        attended = _attention(layer.self_attn, _norm(layer.input_layernorm, hidden), cos, sin, mask, heads, head_dim)
        hidden = hidden + attended
        mlp, normed = layer.mlp, _norm(layer.post_attention_layernorm, hidden)
        gate, up = _projections(normed, mlp.gate_proj, mlp.up_proj).chunk(2, dim=-1)
        hidden = hidden + mlp.down_proj(F.silu(gate) * up)
    return hidden


def head(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits [..., V] of decoder outputs hidden [..., D]: the final norm, then ``lm_head``."""
    base = families.base_model(model)
    return base.lm_head(_norm(base.model.norm, hidden))


def logits(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
           keep: int) -> torch.Tensor:
    """Logits [B, K] x V of the last ``keep`` positions of input_ids [B, S] (mask, positions [B, S]),
    with autograd, equal to ``model(..., logits_to_keep=keep).logits``. Call only if ``supports(model)``."""
    hidden = hidden_states(model, input_ids, position_ids, _mask(attention_mask))
    return head(model, hidden[:, -keep:])
