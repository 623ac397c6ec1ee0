"""The lean decoder kept across rollouts: one per model and sampler dtype (``rollout.sample``), its weight copy
rewritten in place before each rollout (``LeanLlama.refresh``), its KV cache, tables and (stood in on the CPU)
CUDA graph reused while the shapes stay the same.

A kept decoder must sample what a new one would: after a fused AdamW step (which torch's version counters do not
see), with and without LoRA, in float32 and bfloat16, the tokens and log-probs are those of a decoder built on the
new weights, bit for bit (the copy is written by the same code either way, and the same shapes run the same
kernels). The static step's reuse is compared with the dynamic step within the bound of
``test_fast_decode.test_the_static_shape_step_samples_the_tokens_of_the_dynamic_step`` (float32: 1e-5).
"""

from __future__ import annotations

import copy
import gc
import weakref

import pytest
import torch
from tests.engine.test_fast_decode import PROMPTS, _random_llama, _run
from tests.engine.test_static_decode import _FakeCuda, _reordering_gap

from grpolab.engine import fast_decode, rollout, static_decode
from grpolab.engine.rollout import encode_prompts, fixed_weights, release_sampler, sample
from grpolab.evaluation import evaluate
from grpolab.models import Policy, load_policy
from grpolab.tasks import get_task


@pytest.fixture(scope="module")
def embedded():
    torch.set_num_threads(1)
    return load_policy("embedded")


def _lora(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # peft starts B at 0: make the adapters change the outputs
    return model


def _optimizer_step(model, tokenizer) -> None:
    """One step of torch's fused AdamW (the trainer's optimizer) on the trainable parameters: it changes them in
    place without moving their version counters."""
    params = [p for p in model.parameters() if p.requires_grad]
    versions = [p._version for p in params]
    optimizer = torch.optim.AdamW(params, lr=1e-2, fused=True)
    ids, mask = encode_prompts(tokenizer, PROMPTS, use_chat_template=False)
    model(input_ids=ids, attention_mask=mask).logits.float().logsumexp(dim=-1).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    assert [p._version for p in params] == versions  # unseen by the counters: only a copy at every rollout helps


def _count_builds(monkeypatch: pytest.MonkeyPatch) -> list[fast_decode.LeanLlama]:
    built: list[fast_decode.LeanLlama] = []
    build = fast_decode.build
    monkeypatch.setattr(fast_decode, "build", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    return built


def _count_refreshes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    refresh = fast_decode.LeanLlama.refresh
    monkeypatch.setattr(fast_decode.LeanLlama, "refresh", lambda self, model: calls.append(1) or refresh(self, model))
    return calls


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_after_an_optimizer_step_the_kept_decoder_samples_what_a_new_one_samples(
    embedded, lora: bool, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=False)
    model = _lora(model) if lora else model
    built = _count_builds(monkeypatch)
    before = _run(model, embedded.tokenizer, engine="lean", dtype=dtype)
    qkv = built[0].layers[0].qkv
    _optimizer_step(model, embedded.tokenizer)
    kept = _run(model, embedded.tokenizer, engine="lean", dtype=dtype)
    assert len(built) == 1 and built[0].layers[0].qkv is qkv  # the same decoder, its buffers written in place
    release_sampler(model)
    fresh = _run(model, embedded.tokenizer, engine="lean", dtype=dtype)
    assert len(built) == 2
    assert torch.equal(kept.completion_ids, fresh.completion_ids)
    assert torch.equal(kept.logprobs, fresh.logprobs) and torch.equal(kept.entropy, fresh.entropy)
    changed = (kept.logprobs - before.logprobs).abs().max()
    assert changed > 1e-3  # the step changed what is sampled: a stale copy would have been caught above


def test_a_fixed_weights_block_copies_the_weights_once(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a block every rollout copies the weights; inside, only the first, unless the parameters' version
    counters moved (here ``load_state_dict``), when the copy is redone and matches a new decoder's."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    built, refreshes = _count_builds(monkeypatch), _count_refreshes(monkeypatch)
    for _ in range(3):
        _run(model, embedded.tokenizer, engine="lean")
    assert (len(built), len(refreshes)) == (1, 2)
    with fixed_weights(model):
        for _ in range(3):
            _run(model, embedded.tokenizer, engine="lean")
        assert len(refreshes) == 3
        state = {name: tensor * 1.5 for name, tensor in model.state_dict().items()}
        model.load_state_dict(state)
        changed = _run(model, embedded.tokenizer, engine="lean")
        assert len(refreshes) == 4
    release_sampler(model)
    fresh = _run(model, embedded.tokenizer, engine="lean")
    assert torch.equal(changed.logprobs, fresh.logprobs)


def test_an_evaluation_builds_one_decoder_and_copies_the_weights_once(
    embedded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six prompts in batches of two, greedy and sampled: six rollouts, one decoder, no copy after the build; a
    second evaluation copies the weights once."""
    policy = Policy(copy.deepcopy(embedded.model), embedded.tokenizer, "embedded", "embedded")
    built, refreshes = _count_builds(monkeypatch), _count_refreshes(monkeypatch)
    sampled = []
    monkeypatch.setattr(rollout, "_rollout", lambda *a, **k: sampled.append(1) or _rollout(*a, **k))
    first = evaluate(policy, get_task("reverse"), n=2, limit=6, seed=0, batch_prompts=2)
    assert (len(sampled), len(built), len(refreshes)) == (6, 1, 0)
    second = evaluate(policy, get_task("reverse"), n=2, limit=6, seed=0, batch_prompts=2)
    assert (len(built), len(refreshes)) == (1, 1)
    assert first.to_dict() == second.to_dict()


_rollout = rollout._rollout


def test_a_kept_decoder_goes_with_its_model(embedded) -> None:
    """Each model has its own decoder, and no decoder outlives its model."""
    models = [_random_llama(len(embedded.tokenizer), kv_heads=kv, tied=True) for kv in (1, 2)]
    for model in models:
        _run(model, embedded.tokenizer, engine="lean")
    key = (torch.float32, fast_decode.step_mode, fast_decode.stream)
    decoders = [weakref.ref(rollout._KEPT[model].decoders[key]) for model in models]
    assert decoders[0]() is not decoders[1]()
    del model, models
    gc.collect()
    assert [ref() for ref in decoders] == [None, None]


def test_a_kept_cache_serves_a_shorter_rollout_and_other_prompts(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dynamic step reuses a longer cache, the static step one of the same shape with other prompts of the
    same width: each samples the tokens of a new decoder."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    other = list(reversed(PROMPTS))
    for mode, first, then in (("dynamic", {"tokens": 16}, {"tokens": 8}), ("static", {}, {})):
        monkeypatch.setattr(fast_decode, "step_mode", mode)
        built = _count_builds(monkeypatch)
        _run(model, embedded.tokenizer, engine="lean", **first)
        keys = built[0]._keys
        kept = _sample(model, embedded.tokenizer, other, **then)
        assert len(built) == 1 and built[0]._keys is keys
        release_sampler(model)
        fresh = _sample(model, embedded.tokenizer, other, **then)
        assert torch.equal(kept.completion_ids, fresh.completion_ids) and torch.equal(kept.logprobs, fresh.logprobs)


def _sample(model, tokenizer, prompts: list[str], tokens: int = 12):
    ids, mask = encode_prompts(tokenizer, prompts, use_chat_template=False)
    return sample(
        model,
        tokenizer,
        ids,
        mask,
        num_samples=4,
        max_new_tokens=tokens,
        generator=torch.Generator().manual_seed(0),
        engine="lean",
        dtype="float32",
    )


def _graph_inputs(loop: static_decode.StaticDecode) -> list[int]:
    """The addresses of every tensor the captured step reads or writes: a real graph reads them there."""
    lean = loop.lean
    tensors = [
        lean._keys,
        lean._values,
        lean._key_bias,
        lean._next_position,
        lean._slot,
        lean._token,
        lean._cos,
        lean._sin,
        lean.embed,
        lean.lm_head,
        lean.final_norm,
        loop.tokens,
        loop.entropies,
        loop.logprobs,
        loop.finished,
        loop.column,
        loop.uniforms,
    ]
    tensors += [t for layer in lean.layers for t in vars(layer).values() if t is not None]
    return [t.data_ptr() for t in tensors]


def test_kept_graphs_read_the_new_weights_and_are_captured_again_only_for_new_shapes(
    embedded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the stand-in for CUDA's graph API: a second rollout after an optimizer step replays the first rollout's
    graphs (no new capture, the same loop, every input at its address) with the tokens of a new decoder on the new
    weights; a rollout of another length captures again."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    fake = _FakeCuda(monkeypatch)
    monkeypatch.setattr(fast_decode, "step_mode", "graph")
    first = _run(model, embedded.tokenizer, engine="lean")
    loop, captured = fake.decodes[-1], len(fake.captures)
    addresses = _graph_inputs(loop)
    _optimizer_step(model, embedded.tokenizer)
    replays = fake.replays
    second = _run(model, embedded.tokenizer, engine="lean")
    assert captured >= 1 and len(fake.captures) == captured and fake.decodes[-1] is loop
    assert _graph_inputs(loop) == addresses and fake.replays > replays
    assert second.sampler == "lean graph"
    monkeypatch.setattr(fast_decode, "step_mode", "dynamic")  # a new decoder, on the new weights
    reference = _run(model, embedded.tokenizer, engine="lean")
    assert torch.equal(second.completion_ids, reference.completion_ids)
    # the captured static step against the dynamic one: two summation orders (derived, not a measured 1e-5)
    gap = _reordering_gap(model, reference, torch.float32)
    torch.testing.assert_close(second.logprobs, reference.logprobs, atol=gap, rtol=0)
    assert (second.logprobs - first.logprobs).abs().max() > 1e-3
    monkeypatch.setattr(fast_decode, "step_mode", "graph")
    longer = _run(model, embedded.tokenizer, engine="lean", tokens=16)
    assert len(fake.captures) > captured and fake.decodes[-1] is not loop
    assert longer.sampler == "lean graph" and longer.sampler_fallback == ""


def test_a_kept_cache_counts_as_room_for_the_next_rollout(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory check of a rollout counts the KV cache kept from the last one as free (it is reused or let go
    before the new one is allocated): with less memory available than the rollout needs, but enough with the
    kept cache, it samples; without a kept cache it is refused."""
    from grpolab.engine import memory
    from grpolab.errors import UserError

    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    _run(model, embedded.tokenizer, engine="lean")
    held = rollout._held_bytes(model)
    ids, _ = encode_prompts(embedded.tokenizer, PROMPTS, use_chat_template=False)
    need = memory.sampling_bytes(memory.model_shape(model), len(PROMPTS), 4, ids.shape[1], 12)
    assert 0 < held < need
    monkeypatch.setattr(memory, "available_bytes", lambda: need - held // 2)
    _run(model, embedded.tokenizer, engine="lean")
    release_sampler(model)
    with pytest.raises(UserError, match="needs about"):
        _run(model, embedded.tokenizer, engine="lean")
