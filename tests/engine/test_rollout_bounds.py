"""Bounded sampling (grpolab.engine.rollout with grpolab.engine.memory): prompts cut to the model's context
and counted, a budget that chunks a batch without changing its samples, and refusals before allocation."""

from __future__ import annotations

import pytest
import torch
from tests.engine.test_static_decode import _reordering_gap

from grpolab.engine import memory
from grpolab.engine.rollout import encode_prompts, release_sampler, sample
from grpolab.errors import UserError
from grpolab.models import load_policy

pytestmark = pytest.mark.fast

PROMPTS = ["abc", "hello world", "zz", "reverse me please", "q", "xyzzy"]


@pytest.fixture(scope="module")
def embedded():
    return load_policy("embedded")


def _sample(policy, prompts, *, budget: int, temperature: float = 1.0, seed: int = 5, samples: int = 3,
            new_tokens: int = 12):
    ids, mask = encode_prompts(policy.tokenizer, prompts, use_chat_template=False)
    generator = torch.Generator().manual_seed(seed)
    rollout = sample(policy.model, policy.tokenizer, ids, mask, num_samples=samples, max_new_tokens=new_tokens,
                     temperature=temperature, generator=generator, budget_bytes=budget)
    return rollout, generator


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batch_sampled_in_chunks_equals_one_pass(embedded, temperature: float) -> None:
    whole, after_whole = _sample(embedded, PROMPTS, budget=1 << 40, temperature=temperature)
    shape = memory.model_shape(embedded.model)
    one_prompt = memory.sampling_bytes(shape, 1, 3, whole.prompt_ids.shape[1], 12)
    chunked, after_chunked = _sample(embedded, PROMPTS, budget=2 * one_prompt, temperature=temperature)  # 3 chunks
    assert torch.equal(whole.completion_ids, chunked.completion_ids)
    assert torch.equal(whole.completion_mask, chunked.completion_mask)
    assert whole.texts == chunked.texts
    # Chunks are smaller matmuls, which the CPU's BLAS may sum in another order: within the reordering gap of the
    # sums along the path to a log-prob (tests/float_bounds.py), not allclose's 1e-8 (measured 4e-6 at temperature 1).
    gap = _reordering_gap(embedded.model, whole, torch.float32)
    assert (whole.logprobs - chunked.logprobs).abs().max() <= gap
    assert (whole.entropy - chunked.entropy).abs().max() <= gap
    # the generator is left where one pass leaves it, so the next batch is the same too
    assert torch.equal(torch.rand(4, generator=after_whole), torch.rand(4, generator=after_chunked))


def test_prompts_beyond_the_context_keep_their_last_tokens_and_are_counted(embedded) -> None:
    context = memory.context_length(embedded.model)
    assert context == 128
    long_prompt = "abc" * 200  # ~600 tokens: 5.9 GB and a traceback before
    with pytest.warns(RuntimeWarning, match=r"prompts longer than 116 tokens .*context of 128 tokens"):
        rollout, _ = _sample(embedded, [long_prompt, "abc"], budget=1 << 30)
    assert rollout.prompts_truncated == 1
    assert rollout.prompt_ids.shape[1] + rollout.completion_ids.shape[1] <= context
    ids, _ = encode_prompts(embedded.tokenizer, [long_prompt], use_chat_template=False)
    assert torch.equal(rollout.prompt_ids[0], ids[0, -116:])  # the prompt's end, where the question is


def test_no_room_for_a_prompt_is_refused_in_one_line(embedded) -> None:
    with pytest.raises(UserError, match=r"^max_new_tokens 100000 leaves no room for a prompt in the model's "
                                        r"context of 128 tokens; lower --max-new-tokens below 128$"):
        _sample(embedded, ["abc"], budget=1 << 30, new_tokens=100_000)


def test_a_chunk_that_cannot_fit_in_memory_is_refused_before_allocating(embedded, monkeypatch) -> None:
    release_sampler(embedded.model)  # no KV cache kept from an earlier rollout (it would count as free)
    monkeypatch.setattr(memory, "available_bytes", lambda: 50 << 20)  # 50 MiB left
    with pytest.raises(UserError, match=r"sampling 1 prompt\(s\) x 100000 completion\(s\) .* needs about .* GiB of "
                                        r"memory, but only 50 MiB is available; lower the completions per prompt"):
        _sample(embedded, ["abc", "def"], budget=1 << 30, samples=100_000, new_tokens=100)
