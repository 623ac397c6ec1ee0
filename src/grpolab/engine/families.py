"""Which models the lean decoder (``fast_decode``) and the lean training forward (``lean_forward``) take, and why
not the others: ``refusal(model)`` gives the reason in a few words, or None.

Taken: ``FAMILIES`` (bare or under peft with plain LoRA on linear layers), with a SiLU MLP without biases, static
rotary scaling (default, linear, llama3) and full causal attention at every position a run can reach. Refused with
their reason: the Gemma families (see ``fast_decode``'s docstring), other classes, sliding windows that can cut,
other adapters (DoRA, IA3, ...), biases where the family has none. Nothing here departs from the papers: they say
nothing of model families.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FAMILIES", "PROJECTIONS", "base_model", "bias", "lean_forward_takes", "qkv_biased", "refusal"]

FAMILIES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")
"""The model classes the lean path takes (bare or under peft; ``refusal`` says which configs of them); every other
falls back to transformers."""
_GEMMA = ("its (1 + weight) RMSNorms, embeddings scaled by sqrt(hidden size), GeGLU MLP, norms after attention and "
          "MLP too")
_REFUSED = {
    "Gemma3ForCausalLM": f"Gemma 3 is not implemented: {_GEMMA}, q/k norms, interleaved sliding-window layers with "
                         "their own rotary base",
    "Gemma2ForCausalLM": f"Gemma 2 is not implemented: {_GEMMA}, logit soft-capping, interleaved sliding-window layers",
}
"""Why the lean path does not take a family that it is often asked for (other classes: "it takes ``FAMILIES``")."""
_ROPE_TYPES = ("default", "linear", "llama3")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers of a decoder layer, attention's then the MLP's."""


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _linear_refusal(module: nn.Module, name: str, *, bias: bool = False) -> str | None:
    """Why the lean decoder cannot take the linear layer ``module`` (called ``name``), or None: it takes an
    ``nn.Linear`` or a peft LoRA layer on one whose active adapters are plain LoRA, without a bias unless ``bias``."""
    base = module if type(module) is nn.Linear else getattr(module, "base_layer", None)
    if type(base) is not nn.Linear or (base is not module and not hasattr(module, "lora_A")):
        kind = f"{type(module).__module__}.{type(module).__name__}"
        return f"its {name} is a {kind} (it takes nn.Linear, bare or under plain LoRA)"
    if base.bias is not None and not bias:
        return f"a bias on its {name}"
    if base is module or module.disable_adapters or module.merged:
        return None
    for adapter in module.active_adapters:
        if adapter in module.lora_A and (module.lora_variant.get(adapter) is not None
                                         or module.lora_bias.get(adapter)):
            return f"a LoRA variant (DoRA, ...) or a LoRA bias on its {name}"
    return None


def bias(module: nn.Module) -> torch.Tensor | None:
    """The bias of a linear layer (or of a LoRA layer's base layer), or None."""
    return getattr(getattr(module, "base_layer", module), "bias", None)


def qkv_biased(config: object) -> bool:
    """Whether the model's q/k/v projections carry biases (Qwen2 always; Llama with ``attention_bias``)."""
    return config.model_type == "qwen2" or bool(getattr(config, "attention_bias", False))


def _window_refusal(config: object) -> str | None:
    """Why the model's attention is not full causal attention at every position it can reach, or None. Qwen2 and
    Qwen3 say it by ``use_sliding_window`` and ``layer_types``; Mistral by ``sliding_window`` alone, and a window of
    at least ``max_position_embeddings`` never cuts (``rollout.fit_context`` keeps prompt and completion within
    the context), so Mistral's is taken then."""
    kinds = sorted(set(getattr(config, "layer_types", None) or ()))
    if kinds not in ([], ["full_attention"]) or getattr(config, "use_sliding_window", False):
        return f"sliding-window attention (layer_types {kinds})"
    window, context = getattr(config, "sliding_window", None), getattr(config, "max_position_embeddings", None)
    if window is not None and (context is None or window < context):
        return f"a sliding attention window of {window} tokens, below its context of {context}"
    return None


def _config_refusal(base: nn.Module) -> str | None:
    """Why the lean decoder does not take the transformers model ``base`` by its class and config, or None."""
    name, config = type(base).__name__, getattr(base, "config", None)
    if name not in FAMILIES or config is None:
        return _REFUSED.get(name, f"it takes {', '.join(FAMILIES)} only")
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if config.hidden_act != "silu":
        return f"a {config.hidden_act} MLP (it takes SiLU)"
    if getattr(config, "mlp_bias", False):
        return "MLP biases"
    if rope not in _ROPE_TYPES:
        return f"{rope!r} rotary scaling (it takes {', '.join(_ROPE_TYPES)})"
    if type(base.model.embed_tokens) is not nn.Embedding:
        return f"a {type(base.model.embed_tokens).__name__} embedding (it takes nn.Embedding)"
    return _window_refusal(config)


def _module_refusal(base: nn.Module) -> str | None:
    """Why the lean decoder cannot take one of ``base``'s linear layers (an adapter, a bias), or None."""
    biased = qkv_biased(base.config)
    for layer in base.model.layers:
        modules = [getattr(layer.self_attn, n) for n in PROJECTIONS[:4]] + [getattr(layer.mlp, n)
                                                                           for n in PROJECTIONS[4:]]
        for index, (name, module) in enumerate(zip(PROJECTIONS, modules, strict=True)):
            reason = _linear_refusal(module, name, bias=biased and index < 3)
            if reason is None and biased and index < 3 and bias(module) is None:
                reason = f"no bias on its {name} where its config calls for q/k/v biases"
            if reason is not None:
                return reason
    return _linear_refusal(base.lm_head, "lm_head")


def refusal(model: nn.Module) -> str | None:
    """Why the lean decoder does not take ``model`` (bare or under peft), in a few words, or None where ``build``
    takes it: the reason ``rollout.sample``'s fall-back line and its ``Rollout.sampler_fallback`` give."""
    base = base_model(model)
    return _config_refusal(base) or _module_refusal(base)


def lean_forward_takes(base: nn.Module) -> bool:
    """Whether ``lean_forward`` (the update's forward) takes ``base``: the bias-free ``LlamaForCausalLM`` family
    only, on the decoder's config checks (it checks the linear layers itself)."""
    return (type(base).__name__ == "LlamaForCausalLM" and _config_refusal(base) is None
            and not qkv_biased(base.config))
