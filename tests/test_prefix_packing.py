"""Prefix packing (``prefix_packing.logprobs``: each prompt forwarded once, its rows' completions packed
behind it) against the padded transformers forward it replaces in the update.

Tolerances, float32, stated here: log-probs of real completion tokens within 1e-5 of the transformers
forward's (measured ~1e-6); 0 at masked positions; the gradients of a masked log-prob loss within 1e-4
of the largest reference entry of each parameter's gradient.
"""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from grpolab import prefix_packing
from grpolab.config import TrainConfig
from grpolab.models import load_policy
from grpolab.rollout import token_logprobs
from grpolab.training_step import StepBatch, _logprobs

VOCAB = 32


def _random_llama(*, kv_heads: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=16,
                         max_position_embeddings=128, tie_word_embeddings=False, pad_token_id=0)
    return LlamaForCausalLM(config)


def _lora(model: torch.nn.Module) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model


def _models():
    return {
        "embedded": lambda: load_policy("embedded").model,
        "gqa": lambda: _random_llama(kv_heads=2),
        "lora-gqa": lambda: _lora(_random_llama(kv_heads=2)),
    }


def _groups() -> tuple[torch.Tensor, ...]:
    """Three prompts (left-padded, lengths 5, 2, 7) x G = 3 rows, completions of lengths 0..6 out of 6
    columns (right-padded; one row empty, one full)."""
    generator = torch.Generator().manual_seed(2)
    prompts = torch.randint(3, VOCAB, (3, 7), generator=generator)
    prompt_mask = torch.ones_like(prompts)
    for row, length in enumerate([5, 2, 7]):
        prompt_mask[row, : 7 - length] = 0
        prompts[row, : 7 - length] = 0
    prompt_ids, prompt_mask = prompts.repeat_interleave(3, dim=0), prompt_mask.repeat_interleave(3, dim=0)
    completion_ids = torch.randint(3, VOCAB, (9, 6), generator=generator)
    lengths = torch.tensor([3, 6, 1, 0, 4, 2, 5, 5, 6])
    completion_mask = (torch.arange(6) < lengths[:, None]).long()
    return prompt_ids, prompt_mask, completion_ids * completion_mask, completion_mask


def _reference(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    return token_logprobs(model, ids, mask, completion_ids.shape[1], temperature=0.7)[0]


@pytest.mark.parametrize("name", list(_models()))
def test_packed_logprobs_and_gradients_equal_the_padded_forward(name: str) -> None:
    torch.set_num_threads(1)
    model = _models()[name]()
    batch = _groups()
    completion_mask = batch[3]
    valid = completion_mask.bool()
    weights = torch.randn(valid.shape, generator=torch.Generator().manual_seed(3))
    results = []
    for forward in (_reference, lambda m, *b: prefix_packing.logprobs(m, *b, temperature=0.7)):
        model.zero_grad()
        logprobs = forward(model, *batch)
        (logprobs * weights * completion_mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logprobs.detach(), grads))
    (reference, reference_grads), (packed, packed_grads) = results
    assert (packed - reference)[valid].abs().max() < 1e-5
    assert (packed[~valid] == 0).all()
    assert reference_grads.keys() == packed_grads.keys() and reference_grads
    for key, grad in reference_grads.items():
        assert (packed_grads[key] - grad).abs().max() <= 1e-4 * grad.abs().max().clamp(min=1e-12), key


def test_the_packing_forwards_each_prompt_once_and_no_padding() -> None:
    prompt_ids, prompt_mask, _, completion_mask = _groups()
    packing = prefix_packing._pack(prompt_ids, prompt_mask, completion_mask)
    # one sequence per prompt: its real tokens once, then its rows' completion tokens (lengths 15, 8, 23)
    assert packing.source.shape == (3, 7 + 5 + 5 + 6)
    assert packing.positions[1].tolist()[:8] == [0, 1, 2, 3, 4, 5, 2, 3]  # rows 3 (empty), 4, 5
    assert packing.targets.numel() == int(completion_mask.sum()) == 32
    assert packing.predictors.tolist()[:4] == [4, 5, 6, 4]  # row 0 from the prompt's last state, row 1 too


def test_a_completion_never_sees_another_completion_of_its_group() -> None:
    """Changing one row's completion leaves the other rows' log-probs unchanged (the tree mask)."""
    model = _random_llama(kv_heads=4)
    prompt_ids, prompt_mask, completion_ids, completion_mask = _groups()
    with torch.no_grad():
        before = prefix_packing.logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
        changed = completion_ids.clone()
        changed[1] = (changed[1] + 1) % VOCAB * completion_mask[1]
        after = prefix_packing.logprobs(model, prompt_ids, prompt_mask, changed, completion_mask)
    others = [r for r in range(9) if r != 1]
    assert torch.equal(before[others], after[others])
    assert not torch.equal(before[1], after[1])


def test_unaccepted_models_and_masks_return_none() -> None:
    prompt_ids, prompt_mask, completion_ids, completion_mask = _groups()
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    assert prefix_packing.logprobs(gpt2, prompt_ids, prompt_mask, completion_ids, completion_mask) is None
    holey = completion_mask.clone()
    holey[1, 2] = 0  # not a prefix
    assert prefix_packing.logprobs(_random_llama(kv_heads=4), prompt_ids, prompt_mask, completion_ids, holey) is None


def test_the_update_uses_the_packing_with_the_padded_values() -> None:
    """``training_step._logprobs`` on a subset of rows (a group split across micro-batches included)
    gives the padded forward's log-probs."""
    model = _random_llama(kv_heads=2)
    prompt_ids, prompt_mask, completion_ids, completion_mask = _groups()
    batch = StepBatch(problems=[], prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                      completion_mask=completion_mask, rewards=None, texts=[""] * 9,
                      truncated=torch.zeros(9, dtype=torch.bool), entropy=torch.zeros(9, 6))
    rows = [1, 2, 3, 4, 7]
    with torch.no_grad():
        update = _logprobs(model, batch, rows, TrainConfig(temperature=0.7))
        reference = _reference(model, prompt_ids[rows], prompt_mask[rows], completion_ids[rows], completion_mask[rows])
    valid = completion_mask[rows].bool()
    assert (update - reference)[valid].abs().max() < 1e-5 and (update[~valid] == 0).all()
