"""The lean Llama decoder (``fast_decode``) against the transformers forward it replaces in ``rollout.sample``.

Tolerances, on the embedded model (P = 8, G = 4, T = 16):
* float32 lean weights: the same tokens as the transformers path for the same generator, and the
  sampler's log-probs and entropies within the reordering gap of the sums along the path (derived,
  ``tests/engine/test_static_decode.py``'s ``_reordering_gap``: ~1.3e-4 here; measured max 1e-5);
* bfloat16 lean weights: log-probs within 0.05 mean / 0.5 max absolute (measured 0.009 / 0.11), and
  the sampled next-token distribution passes a chi-square test against the float32 probabilities.

Today's families (Qwen3 bare and with LoRA, Llama with Llama 3.x rope scaling, Mistral) on random tiny configs: the
float32 bound above (~7e-5 there; measured max 5e-7), and the bfloat16 bounds above with their logits spread as a
trained model's (derived and measured in ``test_todays_families_bfloat16_logprobs_are_close_to_the_float32_reference``).
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from grpolab.engine import families, fast_decode
from grpolab.engine.rollout import encode_prompts, sample, token_logprobs
from grpolab.errors import UserError
from grpolab.models import load_policy
from grpolab.train.update import sampler_kl

PROMPTS = ["1+2=", "12+34=", "7=", "123+4+56="]  # different lengths: left padding is exercised


@pytest.fixture(scope="module")
def embedded():
    torch.set_num_threads(1)
    return load_policy("embedded")


def _random_llama(vocab: int, *, kv_heads: int, tied: bool, **extra) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=16,
                         max_position_embeddings=128, tie_word_embeddings=tied, pad_token_id=0, **extra)
    return LlamaForCausalLM(config).eval()


def _run(model, tokenizer, *, engine: str, dtype: str = "float32", samples: int = 4, tokens: int = 12, seed: int = 0):
    ids, mask = encode_prompts(tokenizer, PROMPTS, use_chat_template=False)
    return sample(model, tokenizer, ids, mask, num_samples=samples, max_new_tokens=tokens,
                  generator=torch.Generator().manual_seed(seed), engine=engine, dtype=dtype)


def _logprob_gap(model, rollout) -> torch.Tensor:
    """|sampler log-prob - float32 reference log-prob| over the completion tokens."""
    with torch.no_grad():
        reference, _ = token_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.completion_ids.shape[1])
    return (rollout.logprobs - reference)[rollout.completion_mask.bool()].abs()


def _reordering_gap(model, rollout, weights: torch.dtype) -> float:
    """``test_static_decode``'s derived bound on two summation orders' log-prob gap (imported here, where it is
    used, since that module imports this one)."""
    from tests.engine.test_static_decode import _reordering_gap

    return _reordering_gap(model, rollout, weights)


def _assert_float32_lean_equals_reference(model, tokenizer) -> None:
    reference = _run(model, tokenizer, engine="hf")
    lean = _run(model, tokenizer, engine="lean")
    assert torch.equal(lean.completion_ids, reference.completion_ids)
    assert lean.texts == reference.texts
    gap = _reordering_gap(model, reference, torch.float32)  # two kernels' summation orders, not a measured 1e-4
    assert _logprob_gap(model, lean).max() <= gap
    assert (lean.entropy - reference.entropy).abs().max() <= gap


def test_float32_lean_path_samples_the_same_tokens_as_transformers(embedded) -> None:
    _assert_float32_lean_equals_reference(embedded.model.eval(), embedded.tokenizer)


@pytest.mark.parametrize(("kv_heads", "tied"), [(2, False), (1, True), (4, False)])
def test_grouped_query_attention_and_untied_heads(embedded, kv_heads: int, tied: bool) -> None:
    model = _random_llama(len(embedded.tokenizer), kv_heads=kv_heads, tied=tied)
    _assert_float32_lean_equals_reference(model, embedded.tokenizer)


def test_lora_adapters_are_merged_into_the_sampling_weights(embedded) -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_random_llama(len(embedded.tokenizer), kv_heads=2, tied=True),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # peft starts B at 0: make the adapters change the outputs
    with model.disable_adapter():
        bare = _run(model, embedded.tokenizer, engine="hf")
        assert torch.equal(_run(model, embedded.tokenizer, engine="lean").completion_ids, bare.completion_ids)
    assert not torch.equal(_run(model, embedded.tokenizer, engine="lean").completion_ids, bare.completion_ids)
    _assert_float32_lean_equals_reference(model, embedded.tokenizer)


def test_bfloat16_logprobs_are_close_to_the_float32_reference(embedded) -> None:
    rollout = _run(embedded.model.eval(), embedded.tokenizer, engine="lean", dtype="bfloat16", samples=8, tokens=16)
    gap = _logprob_gap(embedded.model, rollout)
    assert gap.numel() > 50
    assert gap.mean() < 0.05 and gap.max() < 0.5


def test_bfloat16_sampling_distribution_matches_the_float32_probabilities(embedded) -> None:
    """2,000 first tokens of one prompt from the bfloat16 sampler against the float32 softmax."""
    model, tokenizer = embedded.model.eval(), embedded.tokenizer
    ids, mask = encode_prompts(tokenizer, ["12+34="], use_chat_template=False)
    draws = 2000
    rollout = sample(model, tokenizer, ids, mask, num_samples=draws, max_new_tokens=1,
                     generator=torch.Generator().manual_seed(1), engine="lean", dtype="bfloat16")
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=ids, attention_mask=mask).logits[0, -1].double(), dim=-1)
    counts = torch.bincount(rollout.completion_ids[:, 0], minlength=probs.numel()).double()
    keep = probs * draws >= 5  # chi-square needs expected counts >= 5; the rest are pooled
    observed = torch.cat([counts[keep], counts[~keep].sum().reshape(1)])
    expected = torch.cat([probs[keep], probs[~keep].sum().reshape(1)]) * draws
    assert keep.sum() >= 2
    expected = expected * observed.sum() / expected.sum()  # float rounding: both must sum alike
    assert stats.chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3


def test_other_architectures_fall_back_to_transformers(embedded) -> None:
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(embedded.tokenizer), n_embd=32, n_layer=1, n_head=2,
                                      n_positions=64)).eval()
    assert fast_decode.build(gpt2) is None
    auto = _run(gpt2, embedded.tokenizer, engine="auto")
    assert torch.equal(auto.completion_ids, _run(gpt2, embedded.tokenizer, engine="hf").completion_ids)
    with pytest.raises(UserError, match="LlamaForCausalLM"):
        _run(gpt2, embedded.tokenizer, engine="lean")
    with pytest.raises(UserError, match="engine"):
        _run(gpt2, embedded.tokenizer, engine="vllm")


def test_sampler_kl_is_k3_of_the_log_ratio() -> None:
    sampler = torch.log(torch.tensor([[0.5, 0.25]]))
    trainer = torch.log(torch.tensor([[0.25, 0.25]]))
    # d = log(0.25 / 0.5) = -log 2: exp(d) - 1 - d = 0.5 - 1 + log 2
    expected = torch.tensor([[0.5 - 1 + torch.log(torch.tensor(2.0)).item(), 0.0]])
    assert torch.allclose(sampler_kl(sampler, trainer), expected)
    assert (sampler_kl(trainer, sampler) >= 0).all()


@pytest.mark.parametrize(("sampler_dtype", "bound"), [("float32", 1e-6), ("bfloat16", 0.05)])
def test_trainer_logs_the_sampler_kl_every_step(tmp_path, sampler_dtype: str, bound: float) -> None:
    from grpolab.config import TrainConfig
    from grpolab.train.trainer import Trainer

    config = TrainConfig(advantage="sign", prompts_per_step=4, group_size=4, steps=2, eval_start=False,
                         checkpoint_every=0, progress=False, threads=1, sampler_dtype=sampler_dtype)
    trainer = Trainer(config, tmp_path / "run")
    for step in (1, 2):
        metrics = trainer.step(step)  # sign trains every completion, so the KL covers all of them
        assert 0 <= metrics["rollout/sampler_kl"] < bound


def test_auto_dtype_is_bfloat16_only_for_models_large_enough(embedded) -> None:
    assert fast_decode.preferred_dtype(embedded.model) == torch.float32
    config = LlamaConfig(vocab_size=32, hidden_size=fast_decode.BF16_MIN_HIDDEN, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=8)
    with torch.device("meta"):
        large = LlamaForCausalLM(config)
    assert fast_decode.preferred_dtype(large) == torch.bfloat16
    with pytest.raises(UserError, match="dtype"):
        _run(embedded.model, embedded.tokenizer, engine="auto", dtype="float16")


# ------------------------------------------------------ the static-shape step (its CUDA graph: test_static_decode.py)


def _modes_sample(model, tokenizer, mode: str, monkeypatch: pytest.MonkeyPatch, **kwargs):
    monkeypatch.setattr(fast_decode, "step_mode", mode)
    return _run(model, tokenizer, engine="lean", **kwargs)


@pytest.mark.parametrize(("kv_heads", "dtype"), [(2, "float32"), (4, "float32"), (1, "bfloat16")])
def test_the_static_shape_step_samples_the_tokens_of_the_dynamic_step(embedded, kv_heads: int, dtype: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The step a CUDA graph replays, run eagerly on the CPU: over the whole cache, unwritten slots under -inf.
    Its logits differ from the dynamic step's only in the summation order over the (zero-weighted) extra slots:
    log-probs within the reordering gap of that dtype (derived, ``_reordering_gap``; measured ~1e-6 / ~1e-3)."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=kv_heads, tied=True)
    dynamic = _modes_sample(model, embedded.tokenizer, "dynamic", monkeypatch, dtype=dtype, tokens=16)
    static = _modes_sample(model, embedded.tokenizer, "static", monkeypatch, dtype=dtype, tokens=16)
    assert torch.equal(static.completion_ids, dynamic.completion_ids)
    assert (static.logprobs - dynamic.logprobs).abs().max() <= _reordering_gap(model, dynamic, getattr(torch, dtype))


def test_the_cpu_keeps_the_dynamic_step(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_decode, "step_mode", "auto")
    assert fast_decode.build(embedded.model, torch.float32).mode == "dynamic"


# ------------------------------------------------------------ Qwen2: q/k/v biases in the fused projection


def _random_qwen2(vocab: int, **extra):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=True, pad_token_id=0, **extra)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # random biases large enough to matter
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("lora", [False, True])
def test_qwen2_takes_the_lean_path_with_the_tokens_of_transformers(embedded, lora: bool) -> None:
    model = _random_qwen2(len(embedded.tokenizer))
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"]))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.5)
    lean = fast_decode.build(model, torch.float32)
    assert lean is not None and lean.layers[0].qkv_bias is not None
    _assert_float32_lean_equals_reference(model, embedded.tokenizer)


# ------------------------------------------------------------ today's families: Qwen3, Llama 3.x rope scaling, Mistral

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16, "rope_theta": 10000.0}
"""Llama 3.x's rotary scaling on a 16-position original context: at head size 16 one frequency is interpolated,
six divided by 8 and one kept, so the rotations at the tested positions differ from the unscaled ones."""


def _random_qwen3(vocab: int, **extra):
    """A tiny ``Qwen3ForCausalLM`` whose q/k norm weights are drawn around 1 (N(1, 0.5)): a decoder that skipped a
    norm, applied it after the rotation or swapped q's and k's would sample other tokens."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                         tie_word_embeddings=False, pad_token_id=0, **extra)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.normal_(1, 0.5)
            layer.self_attn.k_norm.weight.normal_(1, 0.5)
    return model


def _random_mistral(vocab: int, *, sliding_window: int | None = None):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                           sliding_window=sliding_window, tie_word_embeddings=False, pad_token_id=0)
    return MistralForCausalLM(config).eval()


def _with_lora(model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # peft starts B at 0: make the adapters change the outputs
    return model


FAMILY_MODELS = {
    "qwen3": _random_qwen3,
    "qwen3+lora": lambda vocab: _with_lora(_random_qwen3(vocab)),
    "llama3 rope": lambda vocab: _random_llama(vocab, kv_heads=2, tied=False, rope_parameters=LLAMA3_ROPE),
    "mistral": _random_mistral,
}


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_todays_families_take_the_lean_path_with_the_tokens_of_transformers(embedded, family: str) -> None:
    model = FAMILY_MODELS[family](len(embedded.tokenizer))
    assert fast_decode.refusal(model) is None and fast_decode.build(model, torch.float32) is not None
    _assert_float32_lean_equals_reference(model, embedded.tokenizer)
    assert _run(model, embedded.tokenizer, engine="auto").sampler == "lean dynamic"


def test_llama3_rope_scaling_changes_the_tokens(embedded) -> None:
    """The scaling matters at the tested positions: the same weights without it sample other tokens."""
    vocab = len(embedded.tokenizer)
    scaled = _random_llama(vocab, kv_heads=2, tied=True, rope_parameters=LLAMA3_ROPE)
    plain = _random_llama(vocab, kv_heads=2, tied=True)
    assert not torch.equal(scaled.model.rotary_emb.inv_freq, plain.model.rotary_emb.inv_freq)
    assert not torch.equal(_run(scaled, embedded.tokenizer, engine="lean", tokens=16).completion_ids,
                           _run(plain, embedded.tokenizer, engine="lean", tokens=16).completion_ids)


@pytest.mark.parametrize("family", FAMILY_MODELS)
def test_todays_families_bfloat16_logprobs_are_close_to_the_float32_reference(embedded, family: str) -> None:
    """The final norm's weight is scaled by 25 so that the logits spread as a trained model's do (std ~2.4, sampled
    log-probs ~ -1.1; at random init std 0.1, near uniform, and every gap is tiny). The bound, derived: a bfloat16
    matmul rounds each input to 8 significant bits (relative error up to 2^-9, std ~2^-10.8); the head's sum of
    D = 64 such terms of random sign moves a logit by ~0.6 * 2^-9 * std(z) ~ 0.003, the two layers' rounding on the
    residual stream a few times that, and a log-prob moves by its logit's error less the softmax-weighted mean of
    them all: ~0.01 on average, the max over ~450 tokens several times more. The bound is the embedded model's test's,
    mean 0.05 / max 0.5; measured over seeds 0-2: mean <= 0.016, max <= 0.17 (Qwen3 with LoRA, whose merged
    weights are larger; the others <= 0.011 / 0.085)."""
    model = FAMILY_MODELS[family](len(embedded.tokenizer))
    with torch.no_grad():
        families.base_model(model).model.norm.weight.mul_(25)
    rollout = _run(model, embedded.tokenizer, engine="lean", dtype="bfloat16", samples=8, tokens=16)
    assert rollout.sampler == "lean dynamic"
    gap = _logprob_gap(model, rollout)
    assert gap.numel() > 50
    assert gap.mean() < 0.05 and gap.max() < 0.5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_qwen3_static_shape_step_samples_the_tokens_of_the_dynamic_step(embedded, dtype: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """As for Llama: log-probs within the reordering gap of the dynamic step's."""
    model = _random_qwen3(len(embedded.tokenizer))
    dynamic = _modes_sample(model, embedded.tokenizer, "dynamic", monkeypatch, dtype=dtype, tokens=16)
    static = _modes_sample(model, embedded.tokenizer, "static", monkeypatch, dtype=dtype, tokens=16)
    assert torch.equal(static.completion_ids, dynamic.completion_ids)
    assert (static.logprobs - dynamic.logprobs).abs().max() <= _reordering_gap(model, dynamic, getattr(torch, dtype))
    assert static.sampler == "lean static"


def _random_gemma3(vocab: int):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                              pad_token_id=0)
    return Gemma3ForCausalLM(config).eval()


REFUSED_MODELS = {
    "qwen2 sliding window": (lambda vocab: _random_qwen2(vocab, use_sliding_window=True, sliding_window=4,
                                                         max_window_layers=0), "sliding-window attention"),
    "qwen3 sliding window": (lambda vocab: _random_qwen3(vocab, use_sliding_window=True, sliding_window=4,
                                                         max_window_layers=0), "sliding-window attention"),
    "mistral sliding window": (lambda vocab: _random_mistral(vocab, sliding_window=4), "sliding attention window"),
    "gemma3": (_random_gemma3, "Gemma 3 is not implemented"),
}


@pytest.mark.parametrize("family", REFUSED_MODELS)
def test_a_refused_family_falls_back_with_one_line_naming_the_reason(embedded, family: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    from grpolab.engine import rollout

    make, reason = REFUSED_MODELS[family]
    model = make(len(embedded.tokenizer))
    name = type(model).__name__
    assert fast_decode.build(model) is None and reason in fast_decode.refusal(model)
    monkeypatch.setattr(rollout, "_FELL_BACK", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs = [_run(model, embedded.tokenizer, engine="auto", tokens=2) for _ in range(2)]
    lines = [str(w.message) for w in caught if "lean sampler" in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert name in lines[0] and reason in lines[0] and "transformers" in lines[0]
    for got in runs:
        assert got.sampler == "transformers" and name in got.sampler_fallback and reason in got.sampler_fallback
    with pytest.raises(UserError, match=reason):
        _run(model, embedded.tokenizer, engine="lean", tokens=2)


def test_a_window_no_position_reaches_is_full_attention(embedded) -> None:
    """Mistral with a window as long as its context: the window never cuts, so the lean path takes it."""
    model = _random_mistral(len(embedded.tokenizer), sliding_window=128)
    assert fast_decode.refusal(model) is None
    _assert_float32_lean_equals_reference(model, embedded.tokenizer)


def test_an_adapter_the_lean_path_cannot_merge_is_named() -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_random_llama(32, kv_heads=2, tied=True),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["v_proj"], use_dora=True))
    assert fast_decode.build(model) is None
    assert fast_decode.refusal(model) == "a LoRA variant (DoRA, ...) or a LoRA bias on its v_proj"
