"""Sampling speed of SmolLM2-135M against this CPU's bfloat16 matmul roofline, measured in the same run.
Goal: tokens/s of ``rollout.sample`` at batch 32 (P = 8, G = 4), one thread, >= 0.5 of the roofline.

The roofline is the decode step reduced to its matmuls: every linear layer of the model (the LM head
included) run once as a bfloat16 ``F.linear`` on a [32, in] input, timed shape by shape (median of
repeats) and summed; 32 tokens over that time is the most a bfloat16 sampler built on this CPU's
matmul kernels could produce. Sampling and the roofline are measured in interleaved rounds, so the
load of a shared machine hits both alike. ``sample`` runs its default engine (the lean bfloat16 Llama
decoder) with an EOS that never occurs, so every call makes exactly 32 x T tokens; the prefill of the
prompts is included in its time. The extras also give the single-shape rate [32 x 576] . [576 x 1536]
in bfloat16 and float32 (the figure the issue quotes).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

from _common import Row, bench_main, median, one_thread, row, timed
from bench_rollout import NoEosTokenizer

GOAL = 0.5
ROWS = 32


def linear_shapes(model: torch.nn.Module) -> Counter:
    """(in, out) of every linear layer of the model, with how often each occurs."""
    return Counter((m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear))


def matmul_seconds(shape: tuple[int, int], dtype: torch.dtype, repeats: int = 15) -> float:
    """Median wall time of one [ROWS, in] x [in, out] ``F.linear`` in ``dtype``."""
    x, weight = torch.randn(ROWS, shape[0]).to(dtype), torch.randn(shape[1], shape[0]).to(dtype)
    F.linear(x, weight)
    return median([timed(lambda: F.linear(x, weight)) for _ in range(repeats)])


def roofline_step_seconds(shapes: Counter) -> float:
    """The time of one decode step's matmuls at batch ROWS in bfloat16."""
    return sum(count * matmul_seconds(shape, torch.bfloat16) for shape, count in shapes.items())


def _sampler(policy: Any, tokens: int) -> Any:
    from grpolab.engine.rollout import encode_prompts, sample
    from grpolab.tasks import get_task

    task = get_task("arith")
    ids, mask = encode_prompts(policy.tokenizer, [p.prompt for p in task.train[: ROWS // 4]],
                               use_chat_template=task.use_chat_template)
    no_eos = NoEosTokenizer(policy.tokenizer)

    def run() -> None:
        out = sample(policy.model, no_eos, ids, mask, num_samples=4, max_new_tokens=tokens,
                     generator=torch.Generator().manual_seed(0))
        assert out.completion_ids.shape == (ROWS, tokens)

    return run


def run(quick: bool) -> list[Row]:
    from grpolab.models import load_policy

    one_thread()
    policy = load_policy("smollm2-135m")
    policy.model.eval()
    tokens, rounds = (32, 2) if quick else (64, 4)
    shapes = linear_shapes(policy.model)
    run_sample = _sampler(policy, tokens)
    run_sample()  # warm-up
    sample_times, roof_times = [], []
    for _ in range(rounds):
        sample_times.append(timed(run_sample))
        roof_times.append(roofline_step_seconds(shapes))
    speed = ROWS * tokens / median(sample_times)
    roofline = ROWS / median(roof_times)
    flops_per_token = 2.0 * sum(i * o * n for (i, o), n in shapes.items())
    single = {str(dt).removeprefix("torch."): 2 * ROWS * 576 * 1536 / matmul_seconds((576, 1536), dt) / 1e9
              for dt in (torch.float32, torch.bfloat16)}
    ratio = speed / roofline
    detail = (f"sample {speed:.0f} tok/s vs roofline {roofline:.0f} tok/s (bf16 matmuls of one decode step at "
              f"batch {ROWS}: {flops_per_token * ROWS / median(roof_times) / 1e9:.0f} GFLOP/s); P=8 G=4 "
              f"T={tokens}, 1 thread")
    return [row("smollm2_sample_vs_roofline", ratio=ratio, unit="x (tok/s / roofline)", goal=f">= {GOAL}",
                met=ratio >= GOAL, detail=detail, sample_tokens_per_s=round(speed, 1),
                roofline_tokens_per_s=round(roofline, 1), gflop_per_token=round(flops_per_token / 1e9, 4),
                matmul_32x576x1536_gflops={k: round(v, 1) for k, v in single.items()}, rounds=rounds)]


if __name__ == "__main__":
    sys.exit(bench_main(run))
