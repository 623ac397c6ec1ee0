"""The update's activation estimate (``memory.activation_bytes`` over ``memory.update_tokens``, with
``memory.autocast_copy_bytes``) against what autograd saves for the backward of one micro-batch's forward
(``memory.saved_tensor_bytes``), on each forward path the update takes: prefix packing (Llama), the transformers
forward (Qwen2, whose q/k/v biases prefix packing does not take; GPT-2, a plain MLP), LoRA and full fine-tuning,
float32 and bfloat16 autocast.

A layer's share is measured as the difference between a 2-layer and a 1-layer model of the same shape (the
embeddings, head and masks cancel). Attention's scores and masks (a tensor ending in [N, N]) are left out of the
measurement as they are out of the estimate. The claims:

* the estimate is a lower bound: a layer saves at least what it says, so a setting the memory check refuses
  cannot fit (the bound holds by construction of the count; it fails if the estimate counts a tensor some path
  does not keep);
* it is not vacuous: over the tokens forwarded it is at least ``SHARE`` of what a layer saves. Measured on an AMD
  EPYC CPU: Llama 0.52-0.63, Qwen2 0.53-0.70 (the rest: the LoRA adapters' products, float32 copies of the norms'
  inputs under autocast, the fused projections' whole outputs where a path keeps a view of them); GPT-2 0.36-0.39
  (its tanh GELU, written as elementwise operations, keeps several tensors of the MLP's width). The shares are
  below those by about a sixth: which tensors a path keeps depends on the code, not on float rounding, but
  PyTorch may pick another attention kernel on another CPU.

The update's whole estimate against the resident memory it adds: ``tests/engine/test_update_memory.py``.

The token count of a packed forward is exactly ``update_tokens``; the transformers forward forwards each row's
prompt, more than ``update_tokens`` counts, so there the lower bound has room to spare and the share is taken
over the tokens actually forwarded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from grpolab.config import TrainConfig
from grpolab.engine import memory

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[2]

VOCAB = 64
GROUPS, SAMPLES, PROMPT, NEW = 2, 4, 12, 20
SHARE = {"llama": 0.45, "qwen2": 0.45, "gpt2": 0.3}  # the least share of a layer's saved bytes the estimate reaches


def _model(family: str, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    if family == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=layers, n_head=4, n_positions=128,
                                          attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0))
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
    config_class, model_class = classes[family]
    config = config_class(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                          tie_word_embeddings=True, pad_token_id=0)
    return model_class(config)


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_peak_estimate", ROOT / "benchmarks" / "bench_peak_estimate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _layer_share(family: str, config: TrainConfig) -> tuple[int, int, int]:
    """(bytes a layer saves, measured; the estimate's bytes a layer over ``update_tokens``; over the tokens the
    path forwards): ``bench_peak_estimate.layer_share``."""
    share = _bench().layer_share(lambda layers: _model(family, layers), config, groups=GROUPS, samples=SAMPLES,
                                 prompt=PROMPT, new=NEW)
    assert share["packed"] == (family == "llama")  # each family takes the path this file says it does
    return share["measured"], share["lower"], share["forwarded"]


CASES = [("llama", True, "float32"), ("llama", True, "bfloat16"), ("llama", False, "float32"),
         ("llama", False, "bfloat16"), ("qwen2", True, "float32"), ("qwen2", True, "bfloat16"),
         ("qwen2", False, "float32"), ("gpt2", False, "float32"), ("gpt2", False, "bfloat16")]


@pytest.mark.parametrize(("family", "lora", "dtype"), CASES)
def test_a_layers_activation_estimate_is_below_what_autograd_saves_and_not_vacuous(family: str, lora: bool,
                                                                                   dtype: str) -> None:
    torch.set_num_threads(1)
    config = TrainConfig(lora=lora, dtype=dtype, lora_r=4)
    measured, lower, forwarded = _layer_share(family, config)
    assert lower <= measured, f"{family}: the estimate {lower} counts more than a layer saves ({measured})"
    least = SHARE[family]
    assert forwarded >= least * measured, f"{family}: the estimate {forwarded} is under {least} of {measured}"


def test_the_estimate_grows_with_each_size_it_counts() -> None:
    shape = memory.ModelShape(layers=2, heads=4, kv_heads=2, head_dim=8, hidden=32, vocab=100, context=None,
                              intermediate=48, gated=True)
    base = memory.activation_bytes(shape, 10)
    assert base == 10 * 2 * (2 * 32 + 2 * 4 * 8 + 2 * 2 * 8 + 3 * 48) * 4
    assert memory.activation_bytes(shape, 10, 2) * 2 == base
    plain = memory.ModelShape(**{**shape.__dict__, "gated": False})
    assert base - memory.activation_bytes(plain, 10) == 10 * 2 * 2 * 48 * 4
    assert memory.update_tokens(8, 4, 12, 20) == 8 * 20 + 2 * 12
    assert memory.update_tokens(6, 4, 12, 20) == 6 * 20 + 2 * 12  # a micro-batch holding parts of 2 groups
    assert memory.update_tokens(3, 8, 12, 20) == 3 * 20 + 12


def test_autocast_copies_count_each_matmul_weight_once_and_only_under_bfloat16() -> None:
    model = _model("llama", 2)
    linear = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    assert memory.autocast_copy_bytes(model, "float32") == 0
    assert memory.autocast_copy_bytes(model, "bfloat16") == 2 * sum(linear.values())  # the tied head counted once
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert memory.autocast_copy_bytes(model.to(torch.bfloat16), "bfloat16") == 0  # nothing to cast


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_the_shape_reads_the_mlp(family: str) -> None:
    shape = memory.model_shape(_model(family, 1))
    assert (shape.intermediate, shape.gated) == ((96, True) if family != "gpt2" else (4 * 64, False))

