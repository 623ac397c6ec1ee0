"""Sampling (grpolab.engine.rollout): the EOS mask, greedy and nucleus draws, left padding, a sampled batch's layout,
and per-token log-probabilities against a plain full forward."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from grpolab.engine.rollout import _mask_through_first_eos, _next_token, encode_prompts, sample, token_logprobs
from grpolab.models import load_policy

pytestmark = pytest.mark.fast

EOS = 9


@pytest.fixture(scope="module")
def embedded():
    return load_policy("embedded")


def test_the_completion_mask_runs_through_the_first_eos_only() -> None:
    ids = torch.tensor([[1, 2, EOS, 4, EOS], [EOS, 1, 1, 1, 1], [1, 2, 3, 4, 5]])
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    assert torch.equal(_mask_through_first_eos(ids, EOS), expected)


def test_temperature_zero_is_greedy_with_zero_entropy_and_logprob() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, -1.0, 0.5]])
    token, entropy, logprob = _next_token(logits, 0.0, 1.0, None)
    assert token.tolist() == [1, 0] and not entropy.any() and not logprob.any()


def test_nucleus_sampling_draws_only_the_head_and_reports_the_full_logprob() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(20_000, -1)
    generator = torch.Generator().manual_seed(0)
    token, entropy, logprob = _next_token(logits, 1.0, 0.7, generator)  # head {0, 1} holds 0.8 >= 0.7
    counts = torch.bincount(token, minlength=4).double() / token.numel()
    assert counts[2:].sum() == 0 and counts[0].item() == pytest.approx(0.5 / 0.8, abs=0.02)
    torch.testing.assert_close(logprob, probs.log()[token])  # before top-p, at the sampling temperature
    torch.testing.assert_close(entropy[0], -(probs * probs.log()).sum())
    plain, _, _ = _next_token(logits, 1.0, 1.0, torch.Generator().manual_seed(0))
    frequencies = torch.bincount(plain, minlength=4).double() / plain.numel()
    torch.testing.assert_close(frequencies, probs.double(), atol=0.015, rtol=0)


def test_prompts_are_left_padded(embedded) -> None:
    ids, mask = encode_prompts(embedded.tokenizer, ["ab", "abcdefgh"], use_chat_template=False)
    assert ids.shape == mask.shape and mask[1].all() and mask[0, -1] == 1 and mask[0, 0] == 0
    assert (ids[0][mask[0] == 0] == embedded.tokenizer.pad_token_id).all()


def test_a_sampled_batch_keeps_each_prompts_group_together(embedded) -> None:
    tokenizer = embedded.tokenizer
    ids, mask = encode_prompts(tokenizer, ["abc", "hello world"], use_chat_template=False)
    rollout = sample(embedded.model, tokenizer, ids, mask, num_samples=3, max_new_tokens=12, temperature=1.0,
                     generator=torch.Generator().manual_seed(0), engine="hf")
    assert rollout.completion_ids.shape[0] == 6 and len(rollout.texts) == 6
    assert torch.equal(rollout.prompt_ids, ids.repeat_interleave(3, dim=0))  # rows p*G .. p*G+G-1
    assert torch.equal(rollout.completion_mask, _mask_through_first_eos(rollout.completion_ids, tokenizer.eos_token_id))
    has_eos = (rollout.completion_ids == tokenizer.eos_token_id).any(dim=1)
    assert torch.equal(rollout.truncated, ~has_eos)
    assert not rollout.logprobs[rollout.completion_mask == 0].any()
    assert (rollout.logprobs[rollout.completion_mask == 1] < 0).all()
    assert torch.equal(rollout.lengths, rollout.completion_mask.sum(dim=1))
    again = sample(embedded.model, tokenizer, ids, mask, num_samples=3, max_new_tokens=12, temperature=1.0,
                   generator=torch.Generator().manual_seed(0), engine="hf")
    assert again.texts == rollout.texts  # a seed gives one batch
    greedy = sample(embedded.model, tokenizer, ids, mask, num_samples=3, max_new_tokens=12, temperature=0.0)
    assert greedy.texts[0] == greedy.texts[1] == greedy.texts[2] and greedy.texts[3] == greedy.texts[5]


def test_token_logprobs_equal_a_full_forward_by_hand() -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=17, n_positions=32, n_embd=16, n_layer=2, n_head=2)).eval()
    input_ids = torch.randint(0, 17, (3, 9))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :2] = 0  # a left-padded row
    completion = 4
    logprobs, entropy = token_logprobs(model, input_ids, attention_mask, completion, temperature=0.7,
                                       with_entropy=True)
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions).logits / 0.7
    for row in range(3):
        for t in range(completion):
            position = input_ids.shape[1] - completion + t
            expected = torch.log_softmax(logits[row, position - 1], dim=-1)
            torch.testing.assert_close(logprobs[row, t].detach(), expected[input_ids[row, position]])
            torch.testing.assert_close(entropy[row, t], -(expected.exp() * expected).sum())


def test_the_transformers_sampler_uses_no_deprecated_argument(embedded) -> None:
    # was: `past_key_values` (renamed `cache` in transformers 5) warned a FutureWarning from every run's sampler,
    # raw from sweep workers
    import warnings

    ids, mask = encode_prompts(embedded.tokenizer, ["abc"], use_chat_template=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        rollout = sample(embedded.model, embedded.tokenizer, ids, mask, num_samples=2, max_new_tokens=4,
                         generator=torch.Generator().manual_seed(0), engine="hf")
    assert rollout.completion_ids.shape[0] == 2 and rollout.lengths.min() >= 1
