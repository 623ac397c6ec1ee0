"""Checks, before a run or an evaluation samples anything, that its settings fit the model's context and the
memory of this machine; each refusal is one line naming the lengths or sizes and the settings to lower.

* Context: a ``max_new_tokens`` the user set that fills the model's context is refused; so are settings under
  which most prompts would not fit beside it (a setting problem, not a few long prompts). The few that do
  not fit are cut to the room left, with a warning, when they are sampled (``rollout.fit_context``). A task's
  default ``max_new_tokens`` (256 for a file task) that does not fit a small model (the embedded one has 128
  positions) is lowered to what fits beside the longest prompt, with a warning, instead of being refused.
* Memory: one sampling pass (chunked under ``memory.sampler_budget``, so P does not count beyond one
  chunk), the step's P x G completions, and one micro-batch of the update, against ``memory.available_bytes``.

Prompt lengths are measured on at most ``LENGTH_SAMPLE`` prompts of each pool (the first ones).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from grpolab.devices import model_device
from grpolab.engine import memory
from grpolab.errors import UserError

__all__ = ["LENGTH_SAMPLE", "check_evaluation_fits", "check_training_fits", "fit_new_tokens", "prompt_lengths",
           "step_lengths"]

LENGTH_SAMPLE = 2000
"""Prompts per pool whose token lengths are measured."""


def prompt_lengths(tokenizer: Any, prompts: Sequence[str], *, use_chat_template: bool) -> list[int]:
    """Token lengths of ``prompts`` as ``rollout.encode_prompts`` encodes them (chat template included)."""
    prompts = list(prompts)
    if not prompts:
        return []
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for p in prompts]
        encoded = tokenizer(texts, add_special_tokens=False, verbose=False)
    else:
        encoded = tokenizer(prompts, verbose=False)
    return [len(ids) for ids in encoded["input_ids"]]


def fit_new_tokens(model: Any, lengths: list[int], max_new_tokens: int, *, explicit: bool) -> int:
    """``max_new_tokens``, or, when it is a task's default (not ``explicit``) that leaves most prompts no room
    in the model's context, the most that fits beside the longest prompt (or the median one), with a warning."""
    context = memory.context_length(model)
    if explicit or context is None or not lengths:
        return max_new_tokens
    ordered = sorted(lengths)
    over = sum(length > context - max_new_tokens for length in ordered)
    if over * 2 <= len(ordered):
        return max_new_tokens
    fits = context - ordered[-1] if context - ordered[-1] >= 1 else context - ordered[len(ordered) // 2]
    if fits < 1:
        return max_new_tokens  # the check that follows refuses it, naming the lengths
    warnings.warn(f"the task's default max_new_tokens {max_new_tokens} does not fit the model's context of "
                  f"{context} tokens beside its prompts (up to {ordered[-1]} tokens); using {fits} (set "
                  "--max-new-tokens to choose)", RuntimeWarning, stacklevel=3)
    return fits


def _longest_fitting(model: Any, lengths: list[int], max_new_tokens: int, where: str) -> int:
    """The longest prompt length after cutting to the context; refuses when most prompts would not fit."""
    context = memory.context_length(model)
    longest = max(lengths, default=1)
    if context is None:
        return longest
    room = context - max_new_tokens
    if room < 1:
        raise UserError(f"max_new_tokens {max_new_tokens} leaves no room for a prompt in the model's context of "
                        f"{context} tokens; lower --max-new-tokens below {context} (the longest prompt of the "
                        f"{where} has {longest} tokens)")
    over = sorted(length for length in lengths if length > room)
    if len(over) * 2 > len(lengths):
        median = sorted(lengths)[len(lengths) // 2]
        raise UserError(f"{len(over)} of {len(lengths)} prompts of the {where} are longer than the {room} tokens "
                        f"the model's context of {context} leaves beside max_new_tokens {max_new_tokens} "
                        f"(median prompt: {median} tokens); lower --max-new-tokens to at most {context - median}, "
                        "or use shorter prompts or a model with a longer context")
    return min(longest, room)


def _sampling_need(model: Any, prompts: int, samples: int, width: int, new_tokens: int, sampler_dtype: str) -> int:
    """``memory.chunked_sampling_bytes`` where ``model`` is, its rows' KV cache in the dtype the sampler keeps it
    there (on a GPU ``rollout.cuda_kv_bytes`` of ``sampler_dtype``; float32 on the host)."""
    device = model_device(model)
    kv_bytes = 4
    if device.type == "cuda":
        from grpolab.engine.rollout import cuda_kv_bytes

        kv_bytes = cuda_kv_bytes(model, sampler_dtype)
    return memory.chunked_sampling_bytes(memory.model_shape(model), prompts, samples, width, new_tokens,
                                         memory.sampler_budget(device), kv_bytes)


def step_lengths(model: Any, tokenizer: Any, task: Any, config: Any, max_new_tokens: int) -> tuple[int, int]:
    """(the longest train prompt of a step after cutting to the model's context, the ``max_new_tokens`` to use:
    ``fit_new_tokens``) for a training run; refuses prompts that mostly do not fit (``_longest_fitting``)."""
    train = [p.prompt for p in task.train[:LENGTH_SAMPLE]]
    lengths = prompt_lengths(tokenizer, train, use_chat_template=task.use_chat_template)
    max_new_tokens = fit_new_tokens(model, lengths, max_new_tokens, explicit=config.max_new_tokens is not None)
    return _longest_fitting(model, lengths, max_new_tokens, "train split"), max_new_tokens


def check_training_fits(model: Any, tokenizer: Any, task: Any, config: Any, max_new_tokens: int) -> int:
    """Refuse, in one line, a training run (``config``: a ``TrainConfig``) whose prompts do not fit the model's
    context or whose step or evaluation needs more memory than is available. Returns the ``max_new_tokens``
    to use (``fit_new_tokens``: a task default lowered to fit the context)."""
    width, max_new_tokens = step_lengths(model, tokenizer, task, config, max_new_tokens)
    shape = memory.model_shape(model)
    rows = config.prompts_per_step * config.group_size
    sampling = _sampling_need(model, config.prompts_per_step, config.group_size, width, max_new_tokens,
                              config.sampler_dtype)
    batch = memory.batch_bytes(rows, width + max_new_tokens)
    micro = min(config.micro_batch_size, rows)
    tokens = memory.update_tokens(micro, config.group_size, width, max_new_tokens)
    values = memory.compute_bytes(config.dtype)
    update = (memory.update_bytes(shape, micro, max_new_tokens, values) + memory.activation_bytes(shape, tokens, values)
              + memory.autocast_copy_bytes(model, config.dtype))
    memory.refuse_unless_fits(
        sampling + batch + update,
        f"a step of {config.prompts_per_step} prompts x {config.group_size} completions of up to {width} prompt + "
        f"{max_new_tokens} new tokens (sampling {memory.format_bytes(sampling)}, the batch "
        f"{memory.format_bytes(batch)}, the update {memory.format_bytes(update)})",
        "--group-size, --prompts-per-step, --max-new-tokens or --micro-batch-size", device=model_device(model))
    if config.eval_samples:
        pool = task.test if config.eval_split == "test" else task.validation
        limit = config.eval_limit or len(pool)
        check_evaluation_fits(model, tokenizer, [p.prompt for p in pool[:limit]], samples=config.eval_samples,
                              max_new_tokens=max_new_tokens, use_chat_template=task.use_chat_template)
    return max_new_tokens


def check_evaluation_fits(model: Any, tokenizer: Any, prompts: Sequence[str], *, samples: int, max_new_tokens: int,
                          use_chat_template: bool, explicit: bool = True, where: str = "evaluation split",
                          lower: str = "--eval-samples or --max-new-tokens") -> int:
    """Refuse, in one line, sampling ``samples`` per prompt (an evaluation; ``where`` and ``lower`` name it
    otherwise) whose prompts do not fit the model's context or that needs more memory than is available.
    Returns the ``max_new_tokens`` to use (unless ``explicit``, a task default lowered to fit the context)."""
    lengths = prompt_lengths(tokenizer, list(prompts)[:LENGTH_SAMPLE], use_chat_template=use_chat_template)
    if not lengths:
        return max_new_tokens
    max_new_tokens = fit_new_tokens(model, lengths, max_new_tokens, explicit=explicit)
    width = _longest_fitting(model, lengths, max_new_tokens, where)
    need = _sampling_need(model, len(prompts), max(samples, 1), width, max_new_tokens,
                          "bfloat16")  # the sampler's setting is not known here: the smallest cache it may keep
    memory.refuse_unless_fits(need, f"sampling {max(samples, 1)} completions per prompt of the {where} of up to "
                                    f"{width} prompt + {max_new_tokens} new tokens", lower,
                              device=model_device(model))
    return max_new_tokens
