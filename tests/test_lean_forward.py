"""The lean training forward (``lean_forward``) against the transformers forward it replaces in
``rollout.token_logprobs``.

Tolerances, float32, stated here: logits and token log-probs within 1e-5 of transformers' at every
position after a row's first real token (measured: bit-identical on all five models below); the
gradients of a masked log-prob loss within 1e-4 of the largest reference entry of each parameter's
gradient (measured max 8e-7, from the fused q/k/v and gate/up matmuls and the fused RMS norm).
"""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from grpolab import lean_forward
from grpolab.config import TrainConfig
from grpolab.models import load_policy
from grpolab.rollout import _positions, token_logprobs
from grpolab.training_step import StepBatch, _logprobs

VOCAB = 32
KEEP = 7


@pytest.fixture(scope="module")
def embedded():
    torch.set_num_threads(1)
    return load_policy("embedded").model


def _random_llama(*, kv_heads: int, tied: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=16,
                         max_position_embeddings=128, tie_word_embeddings=tied, pad_token_id=0)
    return LlamaForCausalLM(config)


def _lora(model: torch.nn.Module) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj",
                                                                                 "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # peft starts B at 0: make the adapters change the outputs
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """ids, mask [6, 16]: left-padded prompts of different lengths, completions ending at different
    places (right padding), one row with neither."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (6, 16), generator=generator)
    mask = torch.ones_like(ids)
    for row, (lead, end) in enumerate([(0, 16), (3, 16), (5, 12), (1, 10), (8, 14), (2, 16)]):
        mask[row, :lead] = 0
        mask[row, end:] = 0
    return ids, mask


def _reference(model, ids, mask, keep=KEEP) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), logits_to_keep=keep,
                 use_cache=False).logits


def _valid(mask: torch.Tensor, keep=KEEP) -> torch.Tensor:
    """[B, keep] positions after each row's first real token (left padding's logits are unused)."""
    return (mask.cumsum(dim=1) > 0)[:, -keep:]


def _models():
    return {
        "embedded": lambda: load_policy("embedded").model,
        "gqa-untied": lambda: _random_llama(kv_heads=2, tied=False),
        "mqa-tied": lambda: _random_llama(kv_heads=1, tied=True),
        "lora-gqa": lambda: _lora(_random_llama(kv_heads=2, tied=False)),
        "lora-embedded": lambda: _lora(load_policy("embedded").model),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_logits_equal_the_transformers_forward(name: str) -> None:
    model = _models()[name]()
    assert lean_forward.supports(model)
    ids, mask = _batch()
    with torch.no_grad():
        lean = lean_forward.logits(model, ids, mask, _positions(mask), KEEP)
        reference = _reference(model, ids, mask)
    valid = _valid(mask)
    assert (lean - reference)[valid].abs().max() < 1e-5


@pytest.mark.parametrize("name", list(_models()))
def test_gradients_equal_the_transformers_backward(name: str) -> None:
    model = _models()[name]()
    ids, mask = _batch()
    weights = torch.randn(ids.shape[0], KEEP, generator=torch.Generator().manual_seed(2)) * _valid(mask)

    def grads(forward) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        logprobs = torch.log_softmax(forward(), dim=-1).gather(-1, ids[:, -KEEP:, None]).squeeze(-1)
        (logprobs * weights).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    lean = grads(lambda: lean_forward.logits(model, ids, mask, _positions(mask), KEEP))
    reference = grads(lambda: _reference(model, ids, mask))
    assert lean.keys() == reference.keys() and lean
    if name.startswith("lora"):
        assert all("lora_" in n for n in lean)  # the adapters train, the base stays frozen
    for key, expected in reference.items():
        scale = expected.abs().max().clamp(min=1e-8)
        assert (lean[key] - expected).abs().max() / scale < 1e-4, key


def test_token_logprobs_match_the_transformers_forward(embedded) -> None:
    ids, mask = _batch()
    t = KEEP - 1
    with torch.no_grad():
        logprobs, _ = token_logprobs(embedded, ids, mask, t)
        logits = _reference(embedded, ids, mask)[:, :-1]
    expected = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -t:, None]).squeeze(-1)
    assert (logprobs - expected)[mask[:, -t:].bool()].abs().max() < 1e-5


def test_other_architectures_fall_back_to_transformers() -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()
    assert not lean_forward.supports(model)
    ids, mask = _batch()
    logprobs, _ = token_logprobs(model, ids, mask, 4)
    assert logprobs.shape == (6, 4) and torch.isfinite(logprobs).all()


def test_update_log_probs_skip_unused_columns_exactly(embedded) -> None:
    """``training_step._logprobs`` forwards only the columns the chosen rows use; the log-probs of the
    real completion tokens are those of the full-width forward, and 0 past the longest completion."""
    ids, mask = _batch()
    prompt, completion = slice(0, 9), slice(9, 16)
    batch = StepBatch(problems=[], prompt_ids=ids[:, prompt], prompt_mask=mask[:, prompt],
                      completion_ids=ids[:, completion], completion_mask=mask[:, completion],
                      rewards=None, texts=[""] * 6, truncated=torch.zeros(6, dtype=torch.bool),
                      entropy=torch.zeros(6, 7))
    rows = [2, 3]  # leading prompt columns are padding in both, the last completion columns too
    with torch.no_grad():
        trimmed = _logprobs(embedded, batch, rows, TrainConfig())
        full, _ = token_logprobs(embedded, ids[rows], mask[rows], 7)
    valid = mask[rows, completion].bool()
    assert trimmed.shape == full.shape
    assert (trimmed - full)[valid].abs().max() < 1e-5
    used = int(valid.any(dim=0).nonzero().max()) + 1
    assert used < 7 and (trimmed[:, used:] == 0).all()
