"""Step 5 of the GPU check, ``sampling``: on the SmolLM2-shaped model, grpolab's sampler against TRL's own
generation without vLLM (several configurations), same model, GPU, prompts and settings: the step, and the samplers
its child process times. What the step checks: gpu_check.py's docstring."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from gpu_check_setup import Fetch, Step, StepFailed

if TYPE_CHECKING:
    from gpu_check_runner import Check

TRL_SAMPLERS = {"trl": "TRL generate (float32 weights, bf16 autocast)", "trl-bf16": "TRL generate (bf16 weights)",
                "trl-cb": "TRL continuous batching (bf16 weights)"}
"""The TRL generation configurations the sampling race times (``child_sampling``), by their result key."""


TRL_CB_MEMORY = 0.5
"""TRL 1.16's default ``max_memory_percent`` for transformers' continuous batching: the share of free memory its
paged KV cache takes."""
CPU_CB_MEMORY = 0.05
"""The CPU mode's share: on the CPU the cache is sized from the host's free memory, and TRL's half of a 24 GB
machine made this smoke step's process hold 11 GB (the kernel's OOM killer ended it beside other work)."""


def sampling(check: Check, built: Future, fetch: Fetch) -> Step:
    """Step 5: grpolab's sampler against TRL's generations, in a child process (``child_sampling``); on the GPU
    grpolab's tokens/s must be at least the fastest TRL configuration's."""

    def body(step: Step) -> None:
        if built.result().status != "pass":
            raise StepFailed("build-models failed: no model")
        result = fetch("sampling")
        step.metrics.update(result)
        runs = {name: r for name, r in result.items() if isinstance(r, dict) and name in ("grpolab", *TRL_SAMPLERS)}
        trl = {name: r for name, r in runs.items() if name in TRL_SAMPLERS and "tokens_per_s" in r}
        if not trl:
            raise StepFailed("no TRL configuration sampled: " + "; ".join(
                f"{name}: {r.get('error')}" for name, r in runs.items() if name in TRL_SAMPLERS))
        fastest = max(trl, key=lambda name: trl[name]["tokens_per_s"])
        ratio = result["grpolab"]["tokens_per_s"] / trl[fastest]["tokens_per_s"]
        step.metrics.update({"ratio": ratio, "fastest_trl": fastest})
        failed = [f"{name} failed ({r['error'][:80]})" for name, r in runs.items() if "error" in r]
        step.detail = (f"grpolab {result['grpolab']['tokens_per_s']:,.0f} tokens/s; "
                       + ", ".join(f"{TRL_SAMPLERS[name]} {r['tokens_per_s']:,.0f}" for name, r in trl.items())
                       + f"; {ratio:.2f}x the fastest TRL ({TRL_SAMPLERS[fastest]})"
                       + (f"; {'; '.join(failed)}" if failed else ""))
        if not check.cpu and ratio < 1.0:
            raise StepFailed(f"{step.detail}: grpolab's sampler is slower than TRL's fastest generation")

    return check.record("sampling", body)


def child_sampling(spec: dict[str, Any]) -> dict[str, Any]:
    """grpolab's sampler against TRL's generation on one model, one batch, the same settings (gpu_check.py's
    docstring)."""
    import torch

    from grpolab.config import TrainConfig
    from grpolab.engine.rollout import encode_prompts
    from grpolab.models import load_policy
    from grpolab.tasks import get_task
    from grpolab.train.lifecycle import wrap_lora

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    policy = load_policy(spec["model"])
    model = wrap_lora(policy.model, TrainConfig(lora=True)).to(device)
    model.eval()
    task = get_task("reverse")
    prompts = [p.prompt for p in (task.test * 2)[: spec["prompts"]]]
    ids, mask = encode_prompts(policy.tokenizer, prompts, use_chat_template=task.use_chat_template)
    settings = (spec["samples"], spec["max_new_tokens"])
    bf16 = copy.deepcopy(model).to(torch.bfloat16) if cuda else model  # what TRL users load: bfloat16 weights
    samplers = {"grpolab": grpolab_sampler(model, policy.tokenizer),
                "trl": trl_generation(model, policy.tokenizer),
                "trl-bf16": trl_generation(bf16, policy.tokenizer, autocast=False),
                "trl-cb": trl_continuous_batching(bf16, policy.tokenizer, TRL_CB_MEMORY if cuda else CPU_CB_MEMORY)}
    result = {}
    for name, sampler in samplers.items():
        try:
            sampler(ids[:4], mask[:4], 2, 16)  # warm-up: kernels, allocator, the lean decoder's first build
            sync(cuda)
            started = time.perf_counter()
            tokens = sampler(ids, mask, *settings)
            sync(cuda)
        except Exception as error:  # a TRL configuration that does not run here is reported, not fatal
            if name == "grpolab":
                raise
            result[name] = {"error": f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"}
            continue
        elapsed = time.perf_counter() - started
        result[name] = {"tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}
    result["batch"] = {"prompts": len(prompts), "samples": settings[0], "max_new_tokens": settings[1],
                       "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    return result


def sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def grpolab_sampler(model: Any, tokenizer: Any) -> Callable[..., int]:
    """``fn(ids, mask, samples, max_new_tokens) -> completion tokens``: grpolab's sampler as its evaluation runs
    it (temperature 1, the default engine and sampler dtype)."""
    import torch

    from grpolab.engine.rollout import sample

    def run(ids: Any, mask: Any, samples: int, max_new_tokens: int) -> int:
        rollout = sample(model, tokenizer, ids, mask, num_samples=samples, max_new_tokens=max_new_tokens,
                         temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(0))
        return int(rollout.completion_mask.sum())

    return run


def _trl_generation_config(tokenizer: Any, max_new_tokens: int) -> Any:
    """TRL 1.16's ``GenerationConfig`` of a GRPO run at temperature 1 (its defaults for top_k, min_p, the
    repetition penalty and the cache)."""
    from transformers import GenerationConfig
    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, pad_token_id=tokenizer.pad_token_id,
                            bos_token_id=tokenizer.bos_token_id, eos_token_id=[tokenizer.eos_token_id],
                            temperature=1.0, top_p=1.0, top_k=defaults["top_k"], min_p=defaults["min_p"],
                            repetition_penalty=defaults["repetition_penalty"],
                            cache_implementation=defaults["cache_implementation"], disable_compile=True)


def _through_eos(completion: Any, eos_id: int) -> int:
    """Completion tokens [B, T] counted through each row's first EOS."""
    is_eos = completion == eos_id
    return int(((is_eos.long().cumsum(dim=1) - is_eos.long()) == 0).sum())


def trl_continuous_batching(model: Any, tokenizer: Any, memory_percent: float) -> Callable[..., int]:
    """``fn(ids, mask, samples, max_new_tokens) -> completion tokens``: TRL 1.16's
    ``use_transformers_continuous_batching`` path: transformers' ``generate_batch`` (paged KV cache, continuous
    batching) on the bfloat16 model, its paged cache sized to ``memory_percent`` of the free memory (on a GPU, TRL's
    default ``TRL_CB_MEMORY``)."""
    import torch
    from transformers.generation import ContinuousBatchingConfig

    def run(ids: Any, mask: Any, samples: int, max_new_tokens: int) -> int:
        prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True) for _ in range(samples)]
        with torch.no_grad():
            outputs = model.generate_batch(prompts, generation_config=_trl_generation_config(tokenizer, max_new_tokens),
                                           continuous_batching_config=ContinuousBatchingConfig(max_memory_percent=memory_percent),
                                           progress_bar=False)
        return sum(_through_eos(torch.tensor([out.generated_tokens]), tokenizer.eos_token_id)
                   for out in outputs.values())

    return run


def trl_generation(model: Any, tokenizer: Any, *, autocast: bool = True) -> Callable[..., int]:
    """``fn(ids, mask, samples, max_new_tokens) -> completion tokens``: TRL 1.16's generation without vLLM
    (``GRPOTrainer._generate_single_turn``): ``generate`` with its ``GenerationConfig``, the prompts repeated G
    times, under bfloat16 autocast on a GPU where ``autocast`` (accelerate's mixed precision on float32 weights, as
    grpolab's TRL engine ran until it loaded bfloat16 weights), tokens counted through the first EOS."""
    import torch

    device = next(model.parameters()).device

    def run(ids: Any, mask: Any, samples: int, max_new_tokens: int) -> int:
        inputs = ids.repeat_interleave(samples, dim=0).to(device)
        attention = mask.repeat_interleave(samples, dim=0).to(device)
        cast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and autocast
                else contextlib.nullcontext())
        with torch.no_grad(), cast:
            out = model.generate(input_ids=inputs, attention_mask=attention,
                                 generation_config=_trl_generation_config(tokenizer, max_new_tokens))
        return _through_eos(out[:, inputs.shape[1]:], tokenizer.eos_token_id)

    return run
