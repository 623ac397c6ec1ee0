"""Rollout throughput: ``grpolab.engine.rollout.sample`` against the floor (the same cached forward passes and
nothing else) and against HF ``model.generate``. Goal: sample / floor <= 1.3 (time per token).

Every method makes exactly B x T tokens (B = P * G rows, T = the token budget): ``sample`` gets a
tokenizer whose EOS id never occurs, and ``generate`` gets ``eos_token_id=-1`` (never sampled), so the shapes are
the same on every call whatever the weights. The floor is one prefill plus T - 1 one-token forwards
with a ``DynamicCache``: the least any cached sampler must run to produce T tokens. One thread; the
three methods are interleaved and the medians compared. Peak RSS is the process's peak while one
call runs, minus the RSS before it (sampled every 5 ms). The hardware row compares the floor's FLOP
rate (linear layers only) with a one-thread float32 matmul: how far the per-token cost is from compute.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch

from _common import (
    Row,
    bench_main,
    default_model,
    interleaved,
    median,
    mib,
    model_label,
    one_thread,
    peak_rss,
    row,
    timed,
)

GOAL = 1.3


@dataclass(frozen=True)
class Shape:
    """P prompts, G samples each, T new tokens."""

    label: str
    model: str
    prompts: int
    group_size: int
    tokens: int

    @property
    def rows(self) -> int:
        return self.prompts * self.group_size


class NoEosTokenizer:
    """The parts of a tokenizer ``sample`` uses, with an EOS id that never occurs (fixed-length rollouts)."""

    eos_token_id = -1

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.pad_token_id = tokenizer.pad_token_id

    def batch_decode(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(*args, **kwargs)


@torch.no_grad()
def floor_loop(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int) -> None:
    """Prefill + (tokens - 1) cached one-token forwards, with a fixed input token: no sampling at all."""
    from transformers import DynamicCache

    from grpolab.engine.rollout import _positions

    full_mask = torch.cat([mask, mask.new_ones((mask.shape[0], tokens))], dim=1)
    position = _positions(mask)
    cache = DynamicCache()
    model(input_ids=ids, attention_mask=mask, position_ids=position, past_key_values=cache, use_cache=True,
          logits_to_keep=1)
    token = ids[:, -1:]
    last = position[:, -1:]
    width = ids.shape[1]
    for i in range(1, tokens):
        model(input_ids=token, attention_mask=full_mask[:, : width + i], position_ids=last + i,
              past_key_values=cache, use_cache=True)


def _prompts(shape: Shape, tokenizer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    from grpolab.engine.rollout import encode_prompts
    from grpolab.tasks import get_task

    task = get_task("arith")
    texts = [p.prompt for p in task.train[: shape.prompts]]
    return encode_prompts(tokenizer, texts, use_chat_template=task.use_chat_template)


def _methods(shape: Shape, policy: Any) -> dict[str, Any]:
    from transformers import GenerationConfig
    from transformers.utils import logging

    from grpolab.engine.rollout import sample

    logging.set_verbosity_error()  # generate warns once per call about the negative eos_token_id

    model, tokenizer = policy.model.eval(), policy.tokenizer
    ids, mask = _prompts(shape, tokenizer)
    rep_ids, rep_mask = ids.repeat_interleave(shape.group_size, 0), mask.repeat_interleave(shape.group_size, 0)
    no_eos = NoEosTokenizer(tokenizer)
    config = GenerationConfig(do_sample=True, max_new_tokens=shape.tokens, eos_token_id=-1, top_k=0, top_p=1.0,
                              temperature=1.0, pad_token_id=tokenizer.pad_token_id)

    def run_sample() -> None:
        out = sample(model, no_eos, ids, mask, num_samples=shape.group_size, max_new_tokens=shape.tokens,
                     generator=torch.Generator().manual_seed(0))
        assert out.completion_ids.shape == (shape.rows, shape.tokens)

    def run_generate() -> None:
        out = model.generate(input_ids=rep_ids, attention_mask=rep_mask, generation_config=config)
        assert out.shape[1] - rep_ids.shape[1] == shape.tokens

    return {"floor": lambda: floor_loop(model, rep_ids, rep_mask, shape.tokens), "sample": run_sample,
            "generate": run_generate}


def matmul_flops_per_s(size: int = 512, repeats: int = 20) -> float:
    """The one-thread float32 matmul rate of this machine: the compute ceiling a forward pass could reach."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    seconds = median([timed(lambda: torch.mm(a, b)) for _ in range(repeats)])
    return 2 * size**3 / seconds


def flops_per_token(model: Any) -> float:
    """2 x the parameters a token passes through (every linear layer, the LM head included; attention over
    the short cache is left out)."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 2.0 * linear


def _peak_delta(fn: Any) -> float:
    with peak_rss() as sampler:
        before = sampler.peak
        fn()
    return mib(sampler.peak - before)


def measure(shape: Shape, repeats: int) -> list[Row]:
    from grpolab.models import load_policy

    one_thread()
    policy = load_policy(shape.model)
    methods = _methods(shape, policy)
    times = interleaved(methods, repeats)
    achieved = shape.rows * shape.tokens * flops_per_token(policy.model) / median(times["floor"])
    peak = matmul_flops_per_s()
    peaks = {name: _peak_delta(fn) for name, fn in methods.items()}
    tokens = shape.rows * shape.tokens
    speed = {name: tokens / median(t) for name, t in times.items()}
    ratio = median(times["sample"]) / median(times["floor"])
    where = f"{shape.label}: P={shape.prompts} G={shape.group_size} T={shape.tokens}"
    common = {"floor_tokens_per_s": round(speed["floor"]), "sample_tokens_per_s": round(speed["sample"]),
              "generate_tokens_per_s": round(speed["generate"]), "repeats": repeats}
    return [
        row(f"rollout_sample_vs_floor[{shape.label}]", ratio=ratio, unit="x (time/token)", goal=f"<= {GOAL}",
            met=ratio <= GOAL, detail=f"{where}; sample {speed['sample']:.0f} tok/s, floor {speed['floor']:.0f} tok/s",
            **common),
        row(f"rollout_generate_vs_floor[{shape.label}]", ratio=median(times["generate"]) / median(times["floor"]),
            unit="x (time/token)", goal="reference", met=None,
            detail=f"{where}; HF generate {speed['generate']:.0f} tok/s", **common),
        row(f"rollout_floor_vs_matmul_peak[{shape.label}]", ratio=achieved / peak, unit="x (FLOP/s)",
            goal="reference", met=None, detail=f"{where}; floor {achieved / 1e9:.2f} GFLOP/s of the linear layers, "
            f"one-thread 512x512 matmul {peak / 1e9:.1f} GFLOP/s"),
        row(f"rollout_peak_rss[{shape.label}]", value=peaks["sample"], unit="MiB over baseline", goal="reference",
            met=None, detail=f"{where}; floor {peaks['floor']:.1f}, generate {peaks['generate']:.1f} MiB"),
    ]


def shapes(quick: bool) -> list[Shape]:
    model, is_embedded = default_model()
    label = "embedded" if is_embedded else "standin"
    out = [Shape(label, model, 8, 4, 16)]
    if not quick:
        out += [Shape(f"{label}-large", model, 16, 8, 64), Shape("smollm2", "smollm2-135m", 4, 4, 64)]
    return out


def run(quick: bool) -> list[Row]:
    model_note = model_label(default_model()[1])
    results = []
    for shape in shapes(quick):
        for result in measure(shape, repeats=5 if quick else 9):
            result["model"] = shape.model if shape.model == "smollm2-135m" else model_note
            results.append(result)
    return results


if __name__ == "__main__":
    sys.exit(bench_main(run))
