"""The lean decoder's static (CUDA) step with the draw inside it (``static_decode``), run eagerly on the CPU and
through a stand-in for CUDA's graph API: the tokens, entropies and log-probs of the CPU's dynamic loop for the same
seed (greedy, temperature, top-p), the length buckets against the whole-capacity step, a bfloat16 KV cache against
the float32 one, one capture per bucket and one replay per token, and the fall-backs of a failed or empty capture.

Tolerances are derived (``tests/float_bounds.py``): two float computations of one log-prob that sum in different
orders differ by about eps(dtype) * sqrt(terms summed along the path) * the largest value compared; the bfloat16
cache's bound is derived in its test from bfloat16's unit roundoff 2^-8.
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext

import pytest
import torch
from tests.engine.test_fast_decode import PROMPTS, _random_llama
from tests.float_bounds import reordered_sum_gap

from grpolab.engine import fast_decode, static_decode
from grpolab.engine.rollout import encode_prompts, sample
from grpolab.models import load_policy

pytestmark = pytest.mark.fast

K = 4.0  # the gap's multiple of eps * sqrt(terms) * magnitude that a reordering may reach


@pytest.fixture(scope="module")
def embedded():
    torch.set_num_threads(1)
    return load_policy("embedded")


def _sample(model, tokenizer, monkeypatch: pytest.MonkeyPatch, *, mode: str, tokens: int = 16, seed: int = 0,
            temperature: float = 1.0, top_p: float = 1.0, dtype: str = "float32", buckets: int = 32,
            kv: str = "auto"):
    """A rollout with ``fast_decode``'s settings, and the generator after it."""
    monkeypatch.setattr(fast_decode, "step_mode", mode)
    monkeypatch.setattr(fast_decode, "bucket_slots", buckets)
    monkeypatch.setattr(fast_decode, "kv_cache", kv)
    ids, mask = encode_prompts(tokenizer, PROMPTS, use_chat_template=False)
    generator = torch.Generator().manual_seed(seed)
    rollout = sample(model, tokenizer, ids, mask, num_samples=4, max_new_tokens=tokens, temperature=temperature,
                     top_p=top_p, generator=generator, engine="lean", dtype=dtype)
    return rollout, generator


def _path_terms(model, slots: int) -> int:
    """The terms summed along the path to one log-prob (as ``test_lean_forward``'s): per layer two RMS norms and
    the q/k/v and gate/up projections (hidden each), attention over ``slots``, the output and down projections;
    then the final norm, the head and the log-softmax (vocab)."""
    config = model.config
    per_layer = 4 * config.hidden_size + slots + config.hidden_size + config.intermediate_size
    return config.num_hidden_layers * per_layer + 2 * config.hidden_size + config.vocab_size


def _reordering_gap(model, rollout, weights: torch.dtype) -> float:
    """The largest log-prob gap two summation orders of the same rollout may show with ``weights``-dtype matmuls.
    float32: eps(float32) over the terms summed along the path. bfloat16: a float32 reordering can flip the rounding
    of a bfloat16 matmul output by one ulp (eps(bfloat16) of it) at each of the 4 matmuls per layer and the head
    along the path; those flips dominate."""
    magnitude = rollout.logprobs.abs().max() + 1.0  # log-softmax sums the logits' exps: its terms are O(1) too
    if weights == torch.bfloat16:
        return reordered_sum_gap(weights, 4 * model.config.num_hidden_layers + 1, magnitude, k=K)
    return reordered_sum_gap(weights, _path_terms(model, rollout.input_ids.shape[1]), magnitude, k=K)


def _assert_same_rollout(got, want, gap: float) -> None:
    assert torch.equal(got.completion_ids, want.completion_ids)
    assert (got.logprobs - want.logprobs).abs().max() <= gap
    assert (got.entropy - want.entropy).abs().max() <= gap


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8), (0.0, 1.0)])
def test_the_static_step_draws_the_tokens_of_the_cpu_loop(embedded, temperature: float, top_p: float,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The draw inside the step reads the pre-drawn uniforms of the step's column: the same tokens as the CPU's loop,
    which draws them step by step, log-probs and entropies within the reordering gap, and the generator left where
    that loop leaves it."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    dynamic, after_dynamic = _sample(model, embedded.tokenizer, monkeypatch, mode="dynamic", temperature=temperature,
                                     top_p=top_p)
    static, after_static = _sample(model, embedded.tokenizer, monkeypatch, mode="static", temperature=temperature,
                                   top_p=top_p)
    _assert_same_rollout(static, dynamic, _reordering_gap(model, dynamic, torch.float32))
    assert torch.equal(after_static.get_state(), after_dynamic.get_state())
    assert static.sampler == "lean static" and dynamic.sampler == "lean dynamic"
    assert (static.logprobs != 0).any() == (temperature != 0)


def test_rows_that_finish_early_are_padded_as_on_the_cpu(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded model draws EOS within 24 tokens: the finished rows get the pad id from the next step on, and
    the rollout stops where the CPU's loop stops."""
    model = embedded.model.eval()
    dynamic, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="dynamic", tokens=24)
    static, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="static", tokens=24)
    assert not dynamic.truncated.all()
    _assert_same_rollout(static, dynamic, _reordering_gap(model, dynamic, torch.float32))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_length_buckets_give_the_whole_capacity_steps_rollout(embedded, dtype: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets of 4 slots: each step attends over its written slots rounded up to a multiple of 4, and the rollout
    is the whole-capacity step's (the slots past the bucket weigh exp(-inf) = 0 there)."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    ends: list[int] = []
    step = fast_decode.LeanLlama.static_step
    whole, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="static", dtype=dtype, buckets=0)
    monkeypatch.setattr(fast_decode.LeanLlama, "static_step", lambda self, end: ends.append(end) or step(self, end))
    bucketed, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="static", dtype=dtype, buckets=4)
    _assert_same_rollout(bucketed, whole, _reordering_gap(model, whole, getattr(torch, dtype)))
    width, steps = bucketed.prompt_ids.shape[1], bucketed.completion_ids.shape[1]
    written = [width + drawn for drawn in range(1, steps)]  # slots written once a step has cached its token
    assert ends == [min(-(-slots // 4) * 4, width + steps) for slots in written]
    assert all(slots <= end < slots + 4 for slots, end in zip(written, ends, strict=True))


def test_a_bfloat16_cache_stays_within_its_rounding_of_the_float32_cache(embedded,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """float32 weights, the static step with a bfloat16 KV cache against a float32 one, the final norm scaled by 5
    so that the logits spread as a trained model's (sampled log-probs ~ -1.4; at random init ~ -3.4).

    The bound, derived from bfloat16's unit roundoff u = 2^-8 (8 significant bits): a bfloat16 cache rounds each
    key and value, the attention kernel's bfloat16 queries and its output, four roundings per layer, each of
    relative error <= u. Their effects on the residual stream add like a random walk (``tests/float_bounds.py``),
    so the logits move by about u * sqrt(4 * layers) of the largest logit; a log-prob is 2-Lipschitz in the logits
    (its logit's error less the softmax-weighted mean of all of them), so it moves by at most twice that. The same
    tokens for this seed: the log-probs move by well under 1% of a token's probability, so a token flips only where
    a uniform falls that close to a CDF boundary (seed 1 has one such draw). Measured: max gap 3.8e-3 (mean 4.6e-4)
    against a bound of 0.14."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    with torch.no_grad():
        model.model.norm.weight.mul_(5)
    full, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="static", kv="float32")
    half, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="static", kv="bfloat16")
    assert torch.equal(half.completion_ids, full.completion_ids)
    with torch.no_grad():
        logits = model(input_ids=full.input_ids, attention_mask=full.attention_mask).logits
    bound = 2 * 2**-8 * math.sqrt(4 * model.config.num_hidden_layers) * float(logits.abs().max())
    gap = (half.logprobs - full.logprobs).abs()
    assert 0 < gap.max() <= bound  # the cache is bfloat16: the log-probs move, within the bound
    assert (half.entropy - full.entropy).abs().max() <= bound


def test_the_bfloat16_cache_is_the_static_steps_on_cuda_only(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under "auto": bfloat16 for the static step on CUDA with bfloat16 weights; float32 on the CPU and for float32
    weights; float32 for the dynamic step whatever is asked; a value outside ``KV_CACHES`` is refused naming them."""
    monkeypatch.setattr(fast_decode, "step_mode", "static")
    lean = fast_decode.build(embedded.model, torch.bfloat16)
    assert lean.kv_dtype == torch.float32
    lean.device = torch.device("cuda", 0)  # only the device the decoder names
    assert lean.kv_dtype == torch.bfloat16
    assert fast_decode.build(embedded.model, torch.float32).kv_dtype == torch.float32
    monkeypatch.setattr(fast_decode, "kv_cache", "bfloat16")
    assert fast_decode.build(embedded.model, torch.float32).kv_dtype == torch.bfloat16
    monkeypatch.setattr(fast_decode, "step_mode", "dynamic")
    assert fast_decode.build(embedded.model, torch.float32).kv_dtype == torch.float32
    monkeypatch.setattr(fast_decode, "kv_cache", "float16")
    with pytest.raises(ValueError, match="kv_cache must be one of"):
        _ = fast_decode.build(embedded.model, torch.float32).kv_dtype


@pytest.mark.parametrize(("mode", "kv", "kv_bytes"), [("static", "bfloat16", 2), ("static", "float32", 4),
                                                      ("dynamic", "bfloat16", 4)])
def test_the_sampling_estimate_counts_the_cache_in_its_dtype(embedded, mode: str, kv: str, kv_bytes: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from grpolab.engine import memory

    asked: list[int] = []
    estimate = memory.sampling_bytes
    monkeypatch.setattr(memory, "sampling_bytes", lambda *a, **k: asked.append(a[5]) or estimate(*a, **k))
    _sample(embedded.model, embedded.tokenizer, monkeypatch, mode=mode, kv=kv, tokens=2)
    assert asked and set(asked) == {kv_bytes}


def test_chunks_of_prompts_give_the_unchunked_rollout(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget that splits the batch into one prompt per pass: the chunks' uniforms are the unchunked pass's."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    whole, after_whole = _sample(model, embedded.tokenizer, monkeypatch, mode="static")
    monkeypatch.setattr("grpolab.engine.memory.sampler_budget", lambda device=None, reusable=0: 1)
    chunked, after_chunked = _sample(model, embedded.tokenizer, monkeypatch, mode="static")
    _assert_same_rollout(chunked, whole, _reordering_gap(model, whole, torch.float32))
    assert torch.equal(after_chunked.get_state(), after_whole.get_state())


# ------------------------------------------------------------ the CUDA graph, on a stand-in for CUDA's graph API


class _FakeCuda:
    """CUDA's graph API stood in on the CPU, with CUDA's semantics where they matter here: a current device (set by
    ``torch.cuda.device``), streams made on a device (the current one when none is named), a capture that records
    the step without running it (the state the body changed is put back) on its stream's device, and a replay that
    reruns the captured step on the same buffers (``empty``: a replay that runs nothing, as a graph captured on
    another device's stream). Inside a capture, host reads of a tensor (``item``, ``bool``, ...) raise, as they
    break a real capture."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, empty: bool = False) -> None:
        self.current, self.empty = 0, empty
        self.captures: list[dict] = []  # per capture: the current device, the capture stream's device, its bucket
        self.replays = 0
        self.decodes: list[static_decode.StaticDecode] = []
        fake = self

        class Stream:
            def __init__(self, device=None) -> None:
                self.device = fake.current if device is None else _index(device)

            def wait_stream(self, _: object) -> None:
                pass

        class Graph:
            body = None

            def replay(self) -> None:
                fake.replays += 1
                if not fake.empty:
                    self.body()

        @contextmanager
        def device(target):
            saved, fake.current = fake.current, _index(target)
            try:
                yield
            finally:
                fake.current = saved

        step = static_decode.StaticDecode._step

        @contextmanager
        def capture(graph: Graph, pool: object = None, stream: Stream | None = None, **_: object):
            run = fake.decodes[-1]
            capture_stream = stream if stream is not None else Stream()  # torch's own: on the current device
            record = {"current": fake.current, "stream": capture_stream.device}
            fake.captures.append(record)
            state = [t.clone() for t in _written(run)]
            with monkeypatch.context() as patch, _no_host_reads(monkeypatch):
                patch.setattr(static_decode.StaticDecode, "_step",
                              lambda self, end: record.update(end=end) or step(self, end))
                yield
            for tensor, value in zip(_written(run), state, strict=True):
                tensor.copy_(value)  # a capture records the kernels without running them
            graph.body = lambda: step(run, record["end"])

        init = static_decode.StaticDecode.__init__

        def recording(self, *args, **kwargs) -> None:
            init(self, *args, **kwargs)
            fake.decodes.append(self)

        monkeypatch.setattr(static_decode.StaticDecode, "__init__", recording)
        monkeypatch.setattr(fast_decode, "_GRAPH_FAILURE", [])
        monkeypatch.setattr(torch.cuda, "device", device)
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(device))
        monkeypatch.setattr(torch.cuda, "stream", lambda *_: nullcontext())
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(torch.cuda, "graph", capture)
        monkeypatch.setattr(torch.cuda, "graph_pool_handle", object)


def _written(run: static_decode.StaticDecode) -> list[torch.Tensor]:
    """Every tensor a step writes."""
    return [*run._state(), run.lean._keys, run.lean._values, run.tokens, run.entropies, run.logprobs]


def _index(device) -> int:
    device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    return 0 if device.index is None else device.index


def _no_host_reads(monkeypatch: pytest.MonkeyPatch):
    """A block in which reading a tensor's value on the host raises (what breaks a CUDA graph capture)."""

    @contextmanager
    def block():
        with monkeypatch.context() as patch:
            for name in ("item", "tolist", "__bool__", "__int__", "__float__", "numpy"):
                patch.setattr(torch.Tensor, name, _host_read(name))
            yield

    return block()


def _host_read(name: str):
    def refused(*_: object, **__: object):
        raise RuntimeError(f"Tensor.{name}() inside a CUDA graph capture: a host synchronisation")

    return refused


def _graph_sample(model, tokenizer, monkeypatch: pytest.MonkeyPatch, **kwargs):
    return _sample(model, tokenizer, monkeypatch, mode="graph", **kwargs)[0]


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 0.8), (0.0, 1.0)])
def test_each_bucket_is_captured_once_and_replayed_per_token(embedded, temperature: float, top_p: float,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Buckets of 4 slots: one capture per bucket the rollout reaches (the warm-up's effects taken back), one replay
    per token after the prefill's, the draw and the bookkeeping inside the captured step with no host read, and the
    rollout of the CPU's loop."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    dynamic, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="dynamic", temperature=temperature, top_p=top_p)
    fake = _FakeCuda(monkeypatch)
    graphed = _graph_sample(model, embedded.tokenizer, monkeypatch, temperature=temperature, top_p=top_p, buckets=4)
    _assert_same_rollout(graphed, dynamic, _reordering_gap(model, dynamic, torch.float32))
    steps, width = graphed.completion_ids.shape[1], graphed.prompt_ids.shape[1]
    buckets = sorted({min(-(-(width + drawn) // 4) * 4, width + steps) for drawn in range(1, steps)})
    assert [capture["end"] for capture in fake.captures] == buckets and len(buckets) > 2
    assert fake.replays == steps - 1  # one per step after the prefill's token
    assert graphed.sampler == "lean graph" and graphed.sampler_fallback == ""


def test_a_failed_capture_steps_eagerly_with_one_warning(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Capture raising after the warm-up step: the step's state is taken back, the rollout goes on eagerly with the
    same tokens, one warning line, and later rollouts do not try again; each rollout records that it stepped
    eagerly and why."""
    import warnings

    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    dynamic, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="dynamic")
    _FakeCuda(monkeypatch)

    @contextmanager
    def refused(*_: object, **__: object):
        raise RuntimeError("operation not permitted when stream is capturing\nsecond line")
        yield

    monkeypatch.setattr(torch.cuda, "graph", refused)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _graph_sample(model, embedded.tokenizer, monkeypatch)
        second = _graph_sample(model, embedded.tokenizer, monkeypatch)
    lines = [str(w.message) for w in caught if "CUDA graph" in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0] and "steps eagerly" in lines[0]
    for got in (first, second):
        _assert_same_rollout(got, dynamic, _reordering_gap(model, dynamic, torch.float32))
        assert got.sampler == "lean static" and "operation not permitted" in got.sampler_fallback
    assert dynamic.sampler == "lean dynamic" and dynamic.sampler_fallback == ""


def test_the_graph_is_captured_on_the_model_device_and_its_stream(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder on a second GPU (cuda:1) while cuda:0 is current: each capture runs with cuda:1 current and on a
    stream of cuda:1 (PyTorch makes its own capture stream on the current device, so without the guard the graph
    would be captured on cuda:0)."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    fake = _FakeCuda(monkeypatch)
    monkeypatch.setattr(fast_decode, "step_mode", "graph")
    lean = fast_decode.build(model, torch.float32)
    ids, mask = encode_prompts(embedded.tokenizer, PROMPTS, use_chat_template=False)
    logits = lean.prefill(ids, mask, 4, copies=2)
    run = static_decode.StaticDecode(lean, 4, (0.0, 1.0), None, (-1, 0))
    lean.device = torch.device("cuda", 1)  # the tensors stay on the CPU; only the device the decoder names moves
    assert run.sample(logits, 1) == 4
    assert fake.captures and all(c["current"] == 1 and c["stream"] == 1 for c in fake.captures)
    assert fake.current == 0  # the guard gives the current device back
    assert lean.path == "lean graph" and lean.fallback == ""


def test_an_empty_capture_is_caught_at_its_first_replay(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph whose replay runs nothing (captured empty) is found at its first replay: that step is redone
    eagerly, the rollout has the tokens of the dynamic step, and it records the fall-back."""
    import warnings

    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    dynamic, _ = _sample(model, embedded.tokenizer, monkeypatch, mode="dynamic")
    fake = _FakeCuda(monkeypatch, empty=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphed = _graph_sample(model, embedded.tokenizer, monkeypatch)
    _assert_same_rollout(graphed, dynamic, _reordering_gap(model, dynamic, torch.float32))
    assert fake.replays == 1
    assert graphed.sampler == "lean static" and "empty capture" in graphed.sampler_fallback
    assert sum("empty capture" in str(w.message) for w in caught) == 1


def test_a_host_read_inside_the_captured_step_is_a_failed_capture(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in refuses host reads during capture as CUDA does: a step that reads a value back (here an
    ``.item()`` put into the static step) is recorded as a fall-back, not run as a graph."""
    model = _random_llama(len(embedded.tokenizer), kv_heads=2, tied=True)
    _FakeCuda(monkeypatch)
    static_step = fast_decode.LeanLlama.static_step

    def reading(self, end: int):
        self._slot.item()
        return static_step(self, end)

    monkeypatch.setattr(fast_decode.LeanLlama, "static_step", reading)
    with pytest.warns(RuntimeWarning, match="host synchronisation"):
        graphed = _graph_sample(model, embedded.tokenizer, monkeypatch)
    assert graphed.sampler == "lean static" and "host synchronisation" in graphed.sampler_fallback


def _casts_per_step(model, monkeypatch: pytest.MonkeyPatch) -> int:
    """The dtype casts (outermost ``aten::to`` that copy) of one static step of ``model``'s bfloat16 lean copy over a
    bfloat16 KV cache, profiled on the CPU."""
    from torch.profiler import ProfilerActivity, profile

    monkeypatch.setattr(fast_decode, "step_mode", "static")
    monkeypatch.setattr(fast_decode, "kv_cache", "bfloat16")
    lean = fast_decode.build(model, torch.bfloat16)
    ids = torch.randint(3, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    logits = lean.prefill(ids, torch.ones_like(ids), 4)
    lean._token.copy_(logits.argmax(dim=-1))
    lean.static_step(lean.bucket_end(7))  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        lean.static_step(lean.bucket_end(8))
    return sum(event.name == "aten::to" and bool(event.cpu_children) and not _under_aten(event)
               for event in prof.events())


def _under_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None and not parent.name.startswith("aten::"):
        parent = parent.cpu_parent
    return parent is not None


@pytest.mark.parametrize("biased", [False, True])
def test_a_bfloat16_cache_step_casts_four_times_a_layer(monkeypatch: pytest.MonkeyPatch, biased: bool) -> None:
    """Per layer: the two RMS norms' outputs to the weights' dtype, the q/k/v projection to float32 for the rotation,
    and the rotated queries and keys to the cache's dtype once. The values go to the cache as the projection made
    them, and the attention's output stays bfloat16 for the output projection (each of these was a cast to float32
    and back, the identity). A biased q/k/v (Qwen2) adds its bias in float32 first, so its values take one cast."""
    from tests.engine.test_fast_decode import _random_qwen2

    counts = []
    for layers in (1, 2):
        model = _random_qwen2(96) if biased else _random_llama(96, kv_heads=2, tied=True)
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
        counts.append(_casts_per_step(model, monkeypatch))
    assert counts[1] - counts[0] == (5 if biased else 4)
