"""The lean decoder's bfloat16 residual stream (``fast_decode.stream = "bfloat16"``): the static step with its
norms, rotation and residual in bfloat16 over a bfloat16 cache, against the float32 stream over the same cache; the
rotation as one matmul against the rotary tables; the casts and operators a layer it saves; what ``build`` refuses;
and its reuse across rollouts (refresh, the kept decoder, the graph stand-in).

The log-prob bound is derived from bfloat16's unit roundoff u = 2^-8, as the bfloat16 cache's bound in
``test_static_decode``: against the float32 stream, the bfloat16 stream rounds, per layer, the residual after each of
its two adds, the rotary tables' rows and the rotation's output (the float32 stream rounds the rotated queries and keys
once, for the cache, as the stream does), at most 4 more roundings of relative error u a layer, plus the embedding's
once. They add like a random walk (``tests/float_bounds.py``): the logits move by about u sqrt(4 layers + 1) of the
largest logit, and a log-prob, 2-Lipschitz in the logits, by at most twice that.
"""

from __future__ import annotations

import math

import pytest
import torch
from tests.engine.test_fast_decode import PROMPTS, _random_llama, _random_qwen2, _random_qwen3
from tests.engine.test_static_decode import _casts_per_step, _FakeCuda

from grpolab.engine import fast_decode
from grpolab.engine.rollout import _KEPT, encode_prompts, sample
from grpolab.models import load_policy

pytestmark = pytest.mark.fast

U = 2.0**-8  # bfloat16's unit roundoff
MODELS = {"llama": lambda: _random_llama(96, kv_heads=2, tied=True), "qwen2": lambda: _random_qwen2(96),
          "qwen3": lambda: _random_qwen3(96)}


@pytest.fixture(autouse=True)
def static_bfloat16_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    monkeypatch.setattr(fast_decode, "step_mode", "static")
    monkeypatch.setattr(fast_decode, "kv_cache", "bfloat16")


def _build(model, stream: str, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype = torch.bfloat16):
    monkeypatch.setattr(fast_decode, "stream", stream)
    return fast_decode.build(model, dtype)


def _teacher_forced_logits(lean, vocab: int, steps: int = 6) -> torch.Tensor:
    """The prefill's logits of 3 prompts (one left-padded) and those of ``steps`` - 1 static steps fed the same
    random tokens, [steps, 3, V]."""
    ids = torch.randint(3, vocab, (3, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    logits = [lean.prefill(ids, mask, steps)]
    fed = torch.randint(3, vocab, (steps, 3), generator=torch.Generator().manual_seed(1))
    for step in range(steps - 1):
        lean._token.copy_(fed[step])
        logits.append(lean.static_step(lean.bucket_end(ids.shape[1] + step + 1)))
    return torch.stack(logits)


@pytest.mark.parametrize("family", sorted(MODELS))
def test_the_bfloat16_stream_stays_within_its_rounding_of_the_float32_stream(family: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama, Qwen2 (q/k/v biases, added by the matmul in the stream) and Qwen3 (q/k norms), the final norm scaled by
    5 so that the logits spread as a trained model's and the queries by 8 so that attention is peaked: the log-probs
    move (the stream is bfloat16), within the bound of the module docstring. Measured: max gaps 0.021, 0.017 and
    0.031 against bounds of 0.135, 0.064 and 0.062; a rotation with the sine's sign flipped gives 0.24, 0.093 and
    0.94."""
    model = MODELS[family]()
    with torch.no_grad():
        model.model.norm.weight.mul_(5)
        for layer in model.model.layers:  # peaked attention: a wrong rotation or cache write moves the logits
            layer.self_attn.q_proj.weight.mul_(8)
    vocab, layers = model.config.vocab_size, model.config.num_hidden_layers
    full = _teacher_forced_logits(_build(model, "float32", monkeypatch), vocab)
    half = _teacher_forced_logits(_build(model, "bfloat16", monkeypatch), vocab)
    bound = 2 * U * math.sqrt(4 * layers + 1) * float(full.abs().max())
    gap = (half.log_softmax(-1) - full.log_softmax(-1)).abs()
    assert 0 < gap.max() <= bound


def test_the_rotation_matmul_is_the_rotary_tables_rotation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoding step's rotation matrices applied by one matmul give transformers' x cos + rotate_half(x) sin at
    each row's own position, within one bfloat16 rounding of the tables and one of the output (3 u of the largest
    value), against the rotation computed in float64 from the same bfloat16 tables."""
    model = _random_llama(96, kv_heads=2, tied=True)
    lean = _build(model, "bfloat16", monkeypatch)
    lean._rope_tables(64)
    positions = torch.tensor([[0], [5], [17], [63]])
    x = torch.randn(4, 1, 6, lean.head_dim, generator=torch.Generator().manual_seed(2)).bfloat16()
    rotated = lean._rope(x, lean._rotary(positions))
    cos, sin = (table[positions][:, :, None].double() for table in (lean._cos, lean._sin))
    first, second = x.double().chunk(2, dim=-1)
    want = x.double() * cos + torch.cat([second, first], dim=-1) * sin
    assert rotated.dtype == torch.bfloat16 and rotated.shape == x.shape
    assert (rotated.double() - want).abs().max() <= 3 * U * float(want.abs().max())
    assert (rotated.double() - x.double()).abs()[1:].max() > 0.1  # positions past 0 do rotate


def test_the_bfloat16_stream_casts_nothing_a_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The float32 stream casts 4 times a layer over a bfloat16 cache (``test_static_decode``); the bfloat16 stream
    none: its norms, rotation and residual are in the weights' dtype."""
    counts = []
    for layers in (1, 2):
        model = _random_llama(96, kv_heads=2, tied=True)
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
        monkeypatch.setattr(fast_decode, "stream", "bfloat16")
        counts.append(_casts_per_step(model, monkeypatch))
    assert counts[1] == counts[0]


@pytest.mark.parametrize(("mode", "kv", "dtype", "named"), [
    ("dynamic", "bfloat16", torch.bfloat16, "float32 cache and step mode 'dynamic'"),
    ("static", "float32", torch.bfloat16, "float32 cache"),
    ("static", "bfloat16", torch.float32, "torch.float32 weights"),
])
def test_build_refuses_the_bfloat16_stream_without_its_cache_naming_the_fix(
        mode: str, kv: str, dtype: torch.dtype, named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_decode, "step_mode", mode)
    monkeypatch.setattr(fast_decode, "kv_cache", kv)
    with pytest.raises(ValueError, match=r"fast_decode\.stream = 'bfloat16' needs") as refused:
        _build(_random_llama(96, kv_heads=2, tied=True), "bfloat16", monkeypatch, dtype)
    assert named in str(refused.value) and "Set fast_decode.stream = 'float32'" in str(refused.value)


def test_an_unknown_stream_is_refused_naming_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"fast_decode.stream must be one of \('float32', 'bfloat16'\), not 'fp8'"):
        _build(_random_llama(96, kv_heads=2, tied=True), "fp8", monkeypatch)


def test_a_refreshed_bfloat16_stream_copy_is_a_new_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vectors stay bfloat16 through ``refresh`` and hold what a new build copies, bit for bit, after the model's
    weights changed (Qwen2: norms and the q/k/v bias)."""
    model = _random_qwen2(96)
    lean = _build(model, "bfloat16", monkeypatch)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)
    lean.refresh(model)
    fresh = _build(model, "bfloat16", monkeypatch)
    for kept, new in zip(lean.layers, fresh.layers, strict=True):
        for name in ("attn_norm", "mlp_norm", "qkv_bias"):
            assert getattr(kept, name).dtype == torch.bfloat16
            assert torch.equal(getattr(kept, name), getattr(new, name))
    assert torch.equal(lean.final_norm, fresh.final_norm)


def test_rollouts_keep_one_decoder_per_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """``rollout.sample`` keys its kept decoders by the stream too: switching ``stream`` between rollouts samples on
    a decoder of the new stream, not the kept one of the old."""
    embedded = load_policy("embedded")
    ids, mask = encode_prompts(embedded.tokenizer, PROMPTS, use_chat_template=False)
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    streams = []
    for stream in ("float32", "bfloat16"):
        monkeypatch.setattr(fast_decode, "stream", stream)
        sample(model, embedded.tokenizer, ids, mask, num_samples=2, max_new_tokens=4,
               generator=torch.Generator().manual_seed(0), engine="lean", dtype="bfloat16")
        streams.append({decoder.stream for decoder in _KEPT[model].decoders.values()})
    assert streams == [{torch.float32}, {torch.float32, torch.bfloat16}]


def test_the_captured_bfloat16_stream_step_is_the_eager_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the stand-in for CUDA's graph API: the bfloat16 stream's step captured per bucket and replayed gives
    the eager static step's rollout, token for token and bit for bit (the same kernels on the same buffers)."""
    embedded = load_policy("embedded")
    ids, mask = encode_prompts(embedded.tokenizer, PROMPTS, use_chat_template=False)
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    monkeypatch.setattr(fast_decode, "stream", "bfloat16")
    monkeypatch.setattr(fast_decode, "bucket_slots", 4)

    def rollout():
        return sample(model, embedded.tokenizer, ids, mask, num_samples=4, max_new_tokens=12, temperature=1.0,
                      generator=torch.Generator().manual_seed(0), engine="lean", dtype="bfloat16")

    eager = rollout()
    fake = _FakeCuda(monkeypatch)
    monkeypatch.setattr(fast_decode, "step_mode", "graph")
    graphed = rollout()
    assert graphed.sampler == "lean graph" and fake.replays > 0
    assert torch.equal(graphed.completion_ids, eager.completion_ids)
    assert torch.equal(graphed.logprobs, eager.logprobs)
