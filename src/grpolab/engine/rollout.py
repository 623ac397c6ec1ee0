"""Sampling completions with a KV cache, and the per-token log-probabilities of sampled completions.

No reward logic lives here. Shapes: P prompts, G samples each, B = P * G sequences, Lp prompt tokens
(left-padded), T completion tokens (right-padded after the first EOS).

``sample`` is a plain loop over cached forward passes instead of ``model.generate``: it does one
forward per new token and nothing else (no logits processors, no stopping-criteria objects), and takes
an explicit ``torch.Generator`` so that a step's samples depend only on (seed, step). The draw (temperature, top-p
after Holtzman et al. 2020, an inverse-CDF draw) is ``token_draw.next_token``; ``token_logprobs`` uses the same
temperature so that the trained policy is the one that sampled (as TRL does).

Two decoders feed the same sampling loop: for Llama, Qwen2, Qwen3 and Mistral models ``fast_decode.LeanLlama`` (weight
copies in bfloat16 for models large enough to gain from it, a preallocated KV cache; ``engine="auto"`` or
``"lean"``), for every other model the transformers forward with a ``DynamicCache`` (``engine="hf"``; under "auto"
one warning line per model class says so and why: ``fast_decode.refusal``, which the rollout records as its
``sampler_fallback``). On a GPU the lean decoder's static step draws the token inside the step, replayed as a CUDA
graph per token (``static_decode``: the same draws, tokens and log-probs as this loop). The sampler records the
log-probability of each token it drew, so that the trainer can measure how far the sampler's distribution is
from its own (``rollout/sampler_kl``), as trainers that sample with vLLM do.

The lean decoder is kept per model (the transformers model under any peft wrapper, weakly: it goes with the model),
sampler dtype and step mode. Before each rollout its weight copy is rewritten in place from the model's current
weights (``LeanLlama.refresh``), so a rollout after an optimizer step samples from the new weights whatever
changed them; inside a ``fixed_weights`` block (an evaluation, a training step's sampling rounds) only the first
rollout copies them. Its KV cache, tables and CUDA graph are reused while the shapes stay the same. The copy and
the cache stay allocated between rollouts, during the update too; ``release_sampler`` lets them go.

Devices. The sampling loop runs where the model is (``devices.model_device``): the prompts go there once, the
decoder, its KV cache, the token draws, top-p and the EOS tracking stay there, and only the finished token ids,
entropies and log-probs come back to the host, once per rollout (the ``Rollout`` is always on the host). The
uniforms are drawn from the CPU ``generator`` as on the CPU and moved once per rollout, so a seed gives the same
draws on every device. On an accelerator the loop asks whether every row has finished once every
``_FINISH_CHECK_EVERY`` steps instead of every step (each ask waits for the device); the steps run past the
last EOS are dropped, so the completions are those of a check at every step.

Bounded memory (``grpolab.engine.memory``). A prompt longer than the model's context leaves beside
``max_new_tokens`` keeps its last tokens (a warning says so; ``Rollout.prompts_truncated`` counts them), and
``max_new_tokens`` that leaves no room is refused. A batch whose sampling would need more than
``memory.sampler_budget`` (1 GiB on the host, a quarter of a GPU's available memory) is sampled in chunks of
prompts; the uniforms of every row and step are drawn from the generator as one unchunked pass would draw them, so
on the CPU the chunks give the same completions (on a GPU, up to kernels whose rounding depends on the batch size).
A chunk that cannot fit in the memory available is refused in one line before anything is allocated.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from grpolab.devices import model_device, to_host
from grpolab.engine import families, fast_decode, lean_forward, memory, static_decode, weight_copy
from grpolab.engine.target_logprobs import entropy as vocab_entropy
from grpolab.engine.target_logprobs import sum_pi_squared as vocab_sum_pi_squared
from grpolab.engine.target_logprobs import target_logprobs
from grpolab.engine.token_draw import next_token as _next_token
from grpolab.errors import UserError

__all__ = ["ENGINES", "Rollout", "encode_prompts", "fit_context", "fixed_weights", "lean_copy_bytes",
           "release_sampler", "sample", "sampler_weights_dtype", "token_logprobs", "token_statistics"]

ENGINES = ("auto", "lean", "hf")
_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
_FELL_BACK: set[tuple[str, str | None]] = set()  # (model class, reason) the lean sampler refused in this process
_FINISH_CHECK_EVERY = 8
"""Decoding steps between two checks of whether every row has finished, on an accelerator (1 on the CPU)."""


@dataclass
class Rollout:
    """Sampled completions of a batch of prompts.

    Attributes:
        prompt_ids: [B, Lp] left-padded prompt tokens (each prompt repeated G times, adjacent).
        prompt_mask: [B, Lp] 1 for real prompt tokens.
        completion_ids: [B, T] sampled tokens, pad after the first EOS.
        completion_mask: [B, T] 1 up to and including the first EOS.
        texts: B decoded completions (special tokens removed).
        truncated: [B] True where no EOS came within the token budget.
        entropy: [B, T] entropy (nats) of the sampling distribution at each completion token.
        logprobs: [B, T] the sampler's log-probability of each sampled token at the sampling temperature
            (before top-p; 0 after the first EOS and when greedy), or None.
        prompts_truncated: how many of the P prompts lost their first tokens to fit the model's context.
        sampler: how it was sampled, one of ``fast_decode.SAMPLER_PATHS`` ("lean graph", "lean static",
            "lean dynamic", "transformers").
        sampler_fallback: why it was not sampled the way its device and model call for ("" when it was): a CUDA
            graph that failed to capture or replayed nothing, or a model the lean decoder refused under "auto".
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]
    truncated: torch.Tensor
    entropy: torch.Tensor
    logprobs: torch.Tensor | None = None
    prompts_truncated: int = 0
    sampler: str = ""
    sampler_fallback: str = ""

    @property
    def lengths(self) -> torch.Tensor:
        """[B] completion lengths in tokens (EOS included)."""
        return self.completion_mask.sum(dim=1)

    @property
    def input_ids(self) -> torch.Tensor:
        """[B, Lp + T] prompt and completion."""
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[B, Lp + T] mask over prompt and completion tokens."""
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], *, use_chat_template: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize prompts, left-padded: ([P, Lp] ids, [P, Lp] mask). Wraps them in the chat template
    when asked and the tokenizer has one."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
            for p in prompts
        ]
        encoded = tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt",
                            verbose=False)  # over-long prompts are cut and counted by `sample`
    else:
        encoded = tokenizer(prompts, padding=True, padding_side="left", return_tensors="pt", verbose=False)
    return encoded["input_ids"], encoded["attention_mask"]


def _positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


class _HFDecoder:
    """The transformers forward with a ``DynamicCache``: the decoder of every model the lean path refuses."""

    def __init__(self, model: PreTrainedModel, fallback: str = ""):
        self.model = model
        self.cache_keyword = _cache_keyword(model)
        self.fallback = fallback  # why the lean decoder was not used under engine "auto" ("" when asked for "hf")

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int, copies: int = 1) -> torch.Tensor:
        ids, mask = ids.repeat_interleave(copies, dim=0), mask.repeat_interleave(copies, dim=0)
        self.mask, self.cache = mask, DynamicCache()
        self.position = _positions(mask)[:, -1:]
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask),
                         **{self.cache_keyword: self.cache}, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def step(self, token: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.position = self.position + 1
        out = self.model(input_ids=token.unsqueeze(1), attention_mask=self.mask, position_ids=self.position,
                         **{self.cache_keyword: self.cache}, use_cache=True)
        return out.logits[:, -1, :]


def _cache_keyword(model: PreTrainedModel) -> str:
    """The forward's name for the KV cache: ``cache`` where the model's forward takes it (transformers renamed
    ``past_key_values``, which then warns a FutureWarning), else ``past_key_values``. A peft wrapper passes it on."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) else model
    try:
        return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def sampler_weights_dtype(model: PreTrainedModel, dtype: str) -> torch.dtype:
    """The dtype of the lean sampler's copy of the weights for the ``sampler_dtype`` setting ``dtype``."""
    return fast_decode.preferred_dtype(model) if dtype == "auto" else _DTYPES[dtype]


def lean_copy_bytes(model: PreTrainedModel, dtype: str) -> int:
    """Bytes of the copy of the weights the lean sampler keeps for a model (``sampler_dtype`` ``dtype``): the
    base model's parameters (LoRA adapters are merged into it) in that dtype; 0 for a model it does not take."""
    if fast_decode.refusal(model) is not None:
        return 0
    size = torch.empty((), dtype=sampler_weights_dtype(model, dtype)).element_size()
    return size * sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name)


def cuda_kv_bytes(model: PreTrainedModel, dtype: str) -> int:
    """Bytes of a value of the KV cache the sampler keeps for a model on a GPU (``sampler_dtype`` ``dtype``): 2 where
    the lean decoder's static step keeps it in bfloat16 (``fast_decode.LeanLlama.kv_dtype``), else 4."""
    if fast_decode.step_mode == "dynamic" or fast_decode.kv_cache == "float32" or fast_decode.refusal(model):
        return 4
    if fast_decode.kv_cache == "bfloat16" or sampler_weights_dtype(model, dtype) == torch.bfloat16:
        return 2
    return 4


@dataclass
class _Kept:
    """The lean decoders kept for one model: one per sampler dtype and step mode, how many ``fixed_weights`` blocks
    are open, and which decoders were refreshed since the outermost one opened."""

    decoders: dict[tuple[torch.dtype, str], fast_decode.LeanLlama] = field(default_factory=dict)
    fixed: int = 0
    fresh: set[tuple[torch.dtype, str]] = field(default_factory=set)


_KEPT: weakref.WeakKeyDictionary[torch.nn.Module, _Kept] = weakref.WeakKeyDictionary()
"""The lean decoders of each live model (keyed by the transformers model under any peft wrapper): the entry goes
with the model, and a decoder holds tensors only, never the model."""


@contextmanager
def fixed_weights(model: PreTrainedModel) -> Iterator[None]:
    """A block in which ``model``'s weights do not change (an evaluation, a step's sampling rounds): its lean
    decoder copies them at the first ``sample`` inside, not at every one. Outside such blocks every ``sample``
    copies them, so a rollout after an optimizer step never reads a stale copy. Inside, a change torch's version
    counters see (``weight_copy.weights_version``) is still copied; one they miss (torch's fused AdamW) is not."""
    kept = _KEPT.setdefault(families.base_model(model), _Kept())
    kept.fixed += 1
    try:
        yield
    finally:
        kept.fixed -= 1
        if not kept.fixed:
            kept.fresh.clear()


def release_sampler(model: PreTrainedModel) -> None:
    """Let go of the lean decoders kept for ``model`` (their weight copies, KV caches and CUDA graphs); the next
    ``sample`` builds a new one."""
    kept = _KEPT.get(families.base_model(model))
    if kept is not None:
        kept.decoders.clear()
        kept.fresh.clear()


def _lean_decoder(model: PreTrainedModel, weights: torch.dtype) -> fast_decode.LeanLlama | None:
    """The lean decoder of ``model`` in ``weights``, built at the first call and kept; a kept one is refreshed
    with the model's current weights (``LeanLlama.refresh``) unless a ``fixed_weights`` block already did. None
    where the lean path refuses the model."""
    base = families.base_model(model)
    kept = _KEPT.setdefault(base, _Kept())
    key = (weights, fast_decode.step_mode, fast_decode.stream)
    decoder = kept.decoders.get(key)
    if decoder is not None and not decoder.serves(model):  # moved to another device, or an adapter it cannot merge
        kept.decoders.pop(key)
        decoder = None
    if decoder is None:
        decoder = fast_decode.build(model, weights)
        if decoder is None:
            return None
        kept.decoders[key] = decoder
    elif not (kept.fixed and key in kept.fresh and decoder.version == weight_copy.weights_version(base)):
        decoder.refresh(model)
    if kept.fixed:
        kept.fresh.add(key)
    return decoder


def _held_bytes(model: PreTrainedModel) -> int:
    """The bytes of KV cache the decoders kept for ``model`` hold (free for its next rollout to reuse)."""
    kept = _KEPT.get(families.base_model(model))
    return sum(decoder.held_bytes for decoder in kept.decoders.values()) if kept is not None else 0


def _decoder(model: PreTrainedModel, engine: str, dtype: str) -> _HFDecoder | fast_decode.LeanLlama:
    if engine not in ENGINES or dtype not in (*_DTYPES, "auto"):
        raise UserError(f"sampler engine must be one of {ENGINES} and dtype one of auto, {', '.join(_DTYPES)}; "
                        f"got engine={engine!r}, dtype={dtype!r}")
    lean = _lean_decoder(model, sampler_weights_dtype(model, dtype)) if engine != "hf" else None
    if lean is not None:
        return lean
    if engine == "hf":
        return _HFDecoder(model)
    name, reason = type(families.base_model(model)).__name__, fast_decode.refusal(model)
    refused = f"the lean sampler does not take this {name} ({reason})"
    if engine == "lean":
        raise UserError(f"{refused}; use engine='auto' or 'hf'")
    if (name, reason) not in _FELL_BACK:  # one line per model class, reason and process
        _FELL_BACK.add((name, reason))
        warnings.warn(f"{refused}; it samples through the transformers forward (slower)", RuntimeWarning,
                      stacklevel=4)
    return _HFDecoder(model, fallback=refused)


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    num_samples: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    engine: str = "auto",
    dtype: str = "auto",
    budget_bytes: int | None = None,
) -> Rollout:
    """Sample ``num_samples`` completions for each of the P prompts; temperature 0 means greedy. The
    transformers path runs the model in eval mode (and restores its mode); the lean path ignores it.

    Args:
        prompt_ids, prompt_mask: [P, Lp] from ``encode_prompts``.
        num_samples: G, completions per prompt (adjacent in the output: rows p*G .. p*G+G-1).
        max_new_tokens: token budget per completion.
        engine: "auto" (the lean decoder where it applies, else transformers), "lean" or "hf".
        dtype: weights of the lean decoder: "bfloat16", "float32" or "auto" (``fast_decode.preferred_dtype``:
            bfloat16 from hidden size 512 up). The transformers path runs the model as it is.
        budget_bytes: the most memory one sampling pass may use; above it, chunks of prompts (same result).
            Default: ``memory.sampler_budget`` of the model's device (1 GiB on the host, a share of a GPU's memory).

    Raises:
        UserError: ``max_new_tokens`` leaves no room for a prompt in the model's context, or one chunk's
            sampling needs more memory than is available.
    """
    prompt_ids, prompt_mask = to_host(prompt_ids), to_host(prompt_mask)
    prompt_ids, prompt_mask, truncated = fit_context(model, prompt_ids, prompt_mask, max_new_tokens)
    device = model_device(model)
    decoder = _decoder(model, engine, dtype)
    budget = memory.sampler_budget(device, reusable=_held_bytes(model)) if budget_bytes is None else budget_bytes
    kv_bytes = decoder.kv_dtype.itemsize if isinstance(decoder, fast_decode.LeanLlama) else 4
    chunk = _prompts_per_chunk(model, prompt_ids.shape, num_samples, max_new_tokens, budget, kv_bytes)
    ids = prompt_ids.repeat_interleave(num_samples, dim=0)  # [B, Lp]
    mask = prompt_mask.repeat_interleave(num_samples, dim=0)
    switch = isinstance(decoder, _HFDecoder) and model.training  # the lean copy has no dropout to switch off
    if switch:
        model.eval()
    try:
        tokens, entropies, logprobs = _decode_in_chunks(
            decoder, (prompt_ids.to(device), prompt_mask.to(device)), (num_samples, max_new_tokens, chunk),
            (temperature, top_p, generator), (tokenizer.eos_token_id, tokenizer.pad_token_id))
    finally:
        if switch:
            model.train()
    rollout = _rollout(tokenizer, ids, mask, tokens, entropies, logprobs)
    rollout.prompts_truncated = truncated
    rollout.sampler, rollout.sampler_fallback = _sampler_path(decoder)
    return rollout


def _sampler_path(decoder: _HFDecoder | fast_decode.LeanLlama) -> tuple[str, str]:
    """How ``decoder`` sampled (``fast_decode.SAMPLER_PATHS``) and why it fell back, if it did."""
    if isinstance(decoder, fast_decode.LeanLlama):
        return decoder.path, decoder.fallback
    return "transformers", decoder.fallback


def fit_context(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Left-padded prompts [P, Lp] cut to the room the model's context leaves beside ``max_new_tokens``
    (each keeps its last tokens, with a warning), and how many prompts were cut.

    Raises:
        UserError: ``max_new_tokens`` alone fills the context.
    """
    context = memory.context_length(model)
    if context is None:
        return prompt_ids, prompt_mask, 0
    room = context - max_new_tokens
    if room < 1:
        raise UserError(f"max_new_tokens {max_new_tokens} leaves no room for a prompt in the model's context of "
                        f"{context} tokens; lower --max-new-tokens below {context}")
    if prompt_ids.shape[1] <= room:
        return prompt_ids, prompt_mask, 0
    cut = int(prompt_mask[:, :-room].any(dim=1).sum())
    if cut:
        warnings.warn(f"prompts longer than {room} tokens (the model's context of {context} tokens less "
                      f"max_new_tokens {max_new_tokens}) keep only their last {room} tokens; they are counted in "
                      "rollout/prompts_truncated and the evaluations' prompts_truncated", RuntimeWarning,
                      stacklevel=3)
    return prompt_ids[:, -room:], prompt_mask[:, -room:], cut


def _prompts_per_chunk(model: PreTrainedModel, prompt_shape: torch.Size, num_samples: int, max_new_tokens: int,
                       budget_bytes: int, kv_bytes: int) -> int:
    """How many prompts one sampling pass takes under ``budget_bytes`` (at least one, if it fits in memory, the
    KV cache kept from the last pass counted as free), with ``kv_bytes`` a KV cache value."""
    prompts, width = prompt_shape
    shape = memory.model_shape(model)
    one = memory.sampling_bytes(shape, 1, num_samples, width, max_new_tokens, kv_bytes)
    chunk = max(1, min(prompts, budget_bytes // max(one, 1)))
    need = memory.sampling_bytes(shape, chunk, num_samples, width, max_new_tokens, kv_bytes)
    device = model_device(model)
    memory.refuse_unless_fits(need, f"sampling {chunk} prompt(s) x {num_samples} completion(s) of up to {width} "
                                    f"prompt + {max_new_tokens} new tokens",
                              "the completions per prompt (--group-size, --eval-samples) or --max-new-tokens",
                              available=_room(model, device), device=device)
    return chunk


def _room(model: PreTrainedModel, device: torch.device) -> int | None:
    """The memory a sampling pass of ``model`` may allocate: what is available plus the KV cache kept from its last
    pass (let go or reused by the next); None (``refuse_unless_fits`` reads it) when nothing is kept."""
    held = _held_bytes(model)
    if not held:
        return None
    available = memory.available_bytes(device) if device.type == "cuda" else memory.available_bytes()
    return None if available is None else available + held


def _decode_in_chunks(decoder: _HFDecoder | fast_decode.LeanLlama, prompts: tuple[torch.Tensor, torch.Tensor],
                      sizes: tuple[int, int, int], sampling: tuple, special: tuple[int, int]) -> tuple[list, ...]:
    """``_decode`` over chunks of ``sizes[2]`` prompts, merged as one pass (see the module docstring)."""
    prompt_ids, prompt_mask = prompts
    num_samples, max_new_tokens, chunk = sizes
    temperature, _, generator = sampling
    on_host = prompt_ids.device.type == "cpu"
    if chunk >= prompt_ids.shape[0] and (on_host or temperature == 0):
        return _decode(decoder, prompt_ids, prompt_mask, num_samples, max_new_tokens, sampling, special)
    draws = (_Draws(generator, prompt_ids.shape[0] * num_samples, max_new_tokens, prompt_ids.device)
             if temperature != 0 else None)
    parts = []
    for start in range(0, prompt_ids.shape[0], chunk):
        rows = slice(start * num_samples, (start + chunk) * num_samples)
        parts.append(_decode(decoder, prompt_ids[start : start + chunk], prompt_mask[start : start + chunk],
                             num_samples, max_new_tokens, sampling, special,
                             None if draws is None else draws.uniforms[:, rows]))
    steps = max(len(part[0]) for part in parts)
    if draws is not None:
        draws.consume(steps)
    return _merge(parts, steps, special[1])


class _Draws:
    """The uniforms [T, B, 1] one unchunked pass would draw from ``generator`` (one [B, 1] per step), drawn
    ahead; ``consume(steps)`` leaves the generator where that pass would have left it."""

    def __init__(self, generator: torch.Generator | None, rows: int, steps: int,
                 device: torch.device | None = None):
        self.generator = generator if generator is not None else torch.default_generator
        self.state = self.generator.get_state()
        self.uniforms = torch.rand((steps, rows, 1), generator=self.generator).to(device)  # drawn on the host

    def consume(self, steps: int) -> None:
        self.generator.set_state(self.state)
        torch.rand((steps, self.uniforms.shape[1], 1), generator=self.generator)


def _merge(parts: list[tuple[list, ...]], steps: int, pad_id: int) -> tuple[list, ...]:
    """Per-step lists of the chunks' rows joined; a chunk that finished early gets pad tokens and zeros."""
    merged: tuple[list, list, list] = ([], [], [])
    for index, fill in enumerate((pad_id, 0.0, 0.0)):  # tokens, entropies, log-probs
        for step in range(steps):
            rows = [part[index][step] if step < len(part[index]) else torch.full_like(part[index][0], fill)
                    for part in parts]
            merged[index].append(torch.cat(rows))
    return merged


def _decode(decoder: _HFDecoder | fast_decode.LeanLlama, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
            num_samples: int, max_new_tokens: int, sampling: tuple, special: tuple[int, int],
            uniforms: torch.Tensor | None = None) -> tuple[list, ...]:
    """The sampling loop: per-step token [B], entropy [B] and log-prob [B] lists (see ``sample``);
    ``uniforms`` [T, B, 1]: the draws to sample with (default: drawn from the generator step by step). The lean
    decoder's static step samples inside the step (``_decode_static``)."""
    eos_id, pad_id = special
    temperature, top_p, generator = sampling
    logits = decoder.prefill(prompt_ids, prompt_mask, max_new_tokens, copies=num_samples)
    if isinstance(decoder, fast_decode.LeanLlama) and decoder.mode != "dynamic":
        return _decode_static(decoder, logits, max_new_tokens, sampling, special, uniforms)
    check_every = _check_every(logits.device)
    finished = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    tokens: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    logprobs: list[torch.Tensor] = []
    for step in range(max_new_tokens):
        uniform = None if uniforms is None else uniforms[step]
        token, entropy, logprob = _next_token(logits, temperature, top_p, generator, uniform)
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        tokens.append(token)
        entropies.append(entropy)
        logprobs.append(logprob)
        finished |= token == eos_id
        if len(tokens) == max_new_tokens or (len(tokens) % check_every == 0 and bool(finished.all())):
            break  # no forward pass whose logits would go unused
        logits = decoder.step(token)
    if not tokens or tokens[0].device.type == "cpu":
        return tokens, entropies, logprobs
    return _cut_on_host(tuple(torch.stack(values) for values in (tokens, entropies, logprobs)), eos_id)


def _check_every(device: torch.device) -> int:
    return 1 if device.type == "cpu" else _FINISH_CHECK_EVERY


def _decode_static(decoder: fast_decode.LeanLlama, logits: torch.Tensor, max_new_tokens: int, sampling: tuple,
                   special: tuple[int, int], uniforms: torch.Tensor | None) -> tuple[list, ...]:
    """``_decode``'s loop on the lean decoder's static step, which samples in the step (``static_decode``): the
    same tokens, entropies and log-probs. The uniforms are drawn ahead (``_Draws``) when none are given, and the
    generator is left where the step-by-step loop would have left it."""
    temperature, top_p, generator = sampling
    draws = None
    if uniforms is None and temperature != 0:
        draws = _Draws(generator, logits.shape[0], max_new_tokens, logits.device)
        uniforms = draws.uniforms
    run = static_decode.loop_for(decoder, max_new_tokens, (temperature, top_p), uniforms, special)
    steps = run.sample(logits, _check_every(logits.device))
    if draws is not None:
        draws.consume(steps)
    return _cut_on_host(run.outputs(steps), special[0])


def _cut_on_host(stacked: tuple[torch.Tensor, ...], eos_id: int) -> tuple[list, list, list]:
    """Tokens, entropies and log-probs [T, B] each as per-step lists on the host, in one copy each, cut after the
    step where every row had finished (the steps an accelerator ran past it between two checks hold only
    padding)."""
    stacked = [to_host(values) for values in stacked]
    done = (stacked[0] == eos_id).long().cumsum(dim=0).clamp(max=1).all(dim=1)  # [T] all rows past their EOS
    steps = int(done.long().argmax()) + 1 if bool(done.any()) else stacked[0].shape[0]
    return tuple(list(values[:steps].unbind(0)) for values in stacked)


def _rollout(tokenizer: PreTrainedTokenizerBase, ids: torch.Tensor, mask: torch.Tensor, tokens: list[torch.Tensor],
             entropies: list[torch.Tensor], logprobs: list[torch.Tensor]) -> Rollout:
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    completion_ids = torch.stack(tokens, dim=1) if tokens else ids.new_empty((ids.shape[0], 0))
    completion_mask = _mask_through_first_eos(completion_ids, eos_id)
    texts = tokenizer.batch_decode(completion_ids.masked_fill(completion_mask == 0, pad_id), skip_special_tokens=True)
    entropy = torch.stack(entropies, dim=1) * completion_mask if entropies else torch.zeros(completion_ids.shape)
    sampled = (torch.stack(logprobs, dim=1).masked_fill(completion_mask == 0, 0.0) if logprobs
               else torch.zeros(completion_ids.shape))
    truncated = ~(completion_ids == eos_id).any(dim=1)
    return Rollout(ids, mask, completion_ids, completion_mask, texts, truncated, entropy, sampled)


def _mask_through_first_eos(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """[B, T] 1 up to and including the first EOS of each row (all ones when there is none)."""
    is_eos = (completion_ids == eos_id).long()
    before_or_at = is_eos.cumsum(dim=1) - is_eos == 0
    return before_or_at.long()


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    num_completion_tokens: int,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities [B, T] of the last T tokens of ``input_ids`` [B, Lp + T] under ``model``.

    Only the last T + 1 positions' logits are computed (``logits_to_keep``), so the memory is
    B x T x V rather than B x (Lp + T) x V, and no float32 log-softmax of them is kept
    (``target_logprobs``). Llama-family models run through ``lean_forward`` (the same logits with less
    per-call Python), others through their transformers forward. Returns (logprobs, entropy [B, T] or None).
    """
    t = num_completion_tokens
    flat = _completion_logits(model, input_ids, attention_mask, t)
    rows = input_ids.shape[0]
    logprobs = target_logprobs(flat, input_ids[:, -t:].reshape(-1), temperature=temperature).view(rows, t)
    entropy = vocab_entropy(flat, temperature=temperature).view(rows, t) if with_entropy else None
    return logprobs, entropy


@torch.no_grad()
def token_statistics(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     num_completion_tokens: int, *, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-probabilities [B, T] of the last T tokens of ``input_ids`` and the sum over the vocabulary of pi^2
    [B, T] at each of them, from one forward without autograd (the optimal token baseline's inputs,
    ``grpolab.advantages.token_baseline``)."""
    t = num_completion_tokens
    flat = _completion_logits(model, input_ids, attention_mask, t)
    rows = input_ids.shape[0]
    logprobs = target_logprobs(flat, input_ids[:, -t:].reshape(-1), temperature=temperature).view(rows, t)
    return logprobs, vocab_sum_pi_squared(flat, temperature=temperature).view(rows, t)


def _completion_logits(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       t: int) -> torch.Tensor:
    """[B * T, V] logits predicting the last T tokens of ``input_ids`` (only the last T + 1 positions computed)."""
    positions = _positions(attention_mask)
    if lean_forward.supports(model):
        logits = lean_forward.logits(model, input_ids, attention_mask, positions, t + 1)
    else:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                       logits_to_keep=t + 1, use_cache=False).logits
    logits = logits[:, :-1, :]  # [B, T, V], position i predicts token i + 1
    return logits.reshape(logits.shape[0] * t, -1)
