"""``grpolab preflight`` on GSM8K with SmolLM2-135M against grpolab's sampler alone, in one run: does the pre-flight
sample at the sampler's speed?

Preflight side: ``grpolab.preflight.preflight`` as the command runs it (load the model and the task, sample n
completions for each of the first P train prompts in batches of 64 prompts, score them with the ``gsm8k`` verifier,
write counts.csv, the band and control folders, summary.json and the page). Sampler side:
``grpolab.engine.rollout.sample`` alone on the same prompts, encoded the same way, with the same n, token budget,
temperature and seed, on the model the preflight loaded (so that it is loaded once), warmed up outside the timing.
Tokens are the completion tokens each side sampled (up to and including EOS); the preflight's are counted by wrapping
``grpolab.evaluation.collect_batch``, which also times its sampling-and-scoring batches. One torch thread on both
sides. The preflight runs with the band [0, 1], so that a pool with no solved prompt is not refused.

Rows: the preflight's sampling batches in tokens/s over the sampler's (goal >= 0.9: the pre-flight adds only
encoding and scoring to the sampler); the whole preflight (model load, task, outputs included) over the sampler,
for information; and the time of the spec's 500 prompts x 8 samples *extrapolated* from this run: the preflight's
fixed cost (whole - batches) plus 500 / P times its batch time. The extrapolation is linear in prompts; the real
500-prompt run samples batches of 64 prompts (512 rows), whose per-token speed this run does not measure.

Data: GSM8K from ``GRPOLAB_SHARED_DATA`` (default ``../shared/data``) when present, else the 50-problem fixture
``tests/fixtures/gsm8k``. Quick: P = 2, n = 8, T = 32 (the test suite runs it); full: P = 20, n = 8, T = 256
(GSM8K's budget), each side once.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import REPO, Row, bench_main, one_thread, row

GOAL = 0.9
SPEC_PROMPTS = 500
FIXTURE = REPO / "tests" / "fixtures" / "gsm8k"


@dataclass(frozen=True)
class Shape:
    """P train prompts, n samples each, T new tokens at most."""

    prompts: int
    samples: int
    tokens: int


@dataclass
class Timing:
    """One side's wall seconds and sampled completion tokens; the preflight's batch seconds too."""

    seconds: float
    tokens: int
    batch_seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def gsm8k_data() -> Path:
    """The shared GSM8K folder when it is there, else the repository's fixture."""
    shared = Path(os.environ.get("GRPOLAB_SHARED_DATA") or REPO.parent / "shared" / "data") / "gsm8k"
    return shared if (shared / "train.jsonl").is_file() else FIXTURE


def preflight_config(shape: Shape, data: Path) -> Any:
    from grpolab.config import TrainConfig

    return TrainConfig(
        model="smollm2-135m",
        task="gsm8k",
        data=str(data),
        eval_samples=shape.samples,
        eval_limit=shape.prompts,
        max_new_tokens=shape.tokens,
        seed=0,
        device="cpu",
    )


def time_preflight(config: Any) -> tuple[Timing, Any]:
    """The whole preflight, with its sampling batches' tokens and seconds counted by a wrapped ``collect_batch``,
    and the policy it loaded (a wrapped ``load_policy`` hands it back, so that the model is loaded once)."""
    from grpolab import evaluation, models
    from grpolab.preflight import preflight

    originals = evaluation.collect_batch, models.load_policy
    seen: dict[str, Any] = {"tokens": 0, "seconds": 0.0}

    def counting(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        batch = originals[0](*args, **kwargs)
        seen["seconds"] += time.perf_counter() - started
        seen["tokens"] += int(batch.rollout.completion_mask.sum())
        return batch

    def keeping(*args: Any, **kwargs: Any) -> Any:
        seen["policy"] = originals[1](*args, **kwargs)
        return seen["policy"]

    evaluation.collect_batch, models.load_policy = counting, keeping
    try:
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            preflight(config, out, band=(0.0, 1.0))  # every prompt in the band: no refusal when none is solved
            seconds = time.perf_counter() - started
    finally:
        evaluation.collect_batch, models.load_policy = originals
    return Timing(seconds, seen["tokens"], seen["seconds"]), seen["policy"]


def time_sampler(config: Any, policy: Any) -> Timing:
    """``rollout.sample`` alone on the preflight's prompts with the preflight's model, warmed up before the clock."""
    import torch

    from grpolab.engine.rollout import encode_prompts, sample
    from grpolab.train.lifecycle import load_task_for

    task = load_task_for(config)
    problems = list(task.train[: config.eval_limit])
    ids, mask = encode_prompts(policy.tokenizer, [p.prompt for p in problems], use_chat_template=task.use_chat_template)
    sample(policy.model, policy.tokenizer, ids[:1], mask[:1], num_samples=1, max_new_tokens=4)
    started = time.perf_counter()
    rollout = sample(
        policy.model,
        policy.tokenizer,
        ids,
        mask,
        num_samples=config.eval_samples,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        generator=torch.Generator().manual_seed(config.seed),
    )
    return Timing(time.perf_counter() - started, int(rollout.completion_mask.sum()))


def extrapolated_seconds(preflight: Timing, prompts: int, target: int = SPEC_PROMPTS) -> float:
    """The preflight's fixed cost plus its batch time scaled linearly from ``prompts`` to ``target`` prompts."""
    return (preflight.seconds - preflight.batch_seconds) + preflight.batch_seconds * target / prompts


def rows(shape: Shape, preflight: Timing, sampler: Timing, data: Path) -> list[Row]:
    if preflight.tokens != sampler.tokens:  # same prompts, n, budget and seed must sample the same completions
        raise RuntimeError(
            f"the preflight sampled {preflight.tokens} tokens and the sampler {sampler.tokens}: the "
            "two sides did not sample the same completions, so their speeds are not comparable"
        )
    batches = (preflight.tokens / preflight.batch_seconds) / sampler.tokens_per_s
    whole = preflight.tokens_per_s / sampler.tokens_per_s
    where = "shared GSM8K" if data != FIXTURE else "GSM8K fixture"
    size = f"{where}, P={shape.prompts} n={shape.samples} T<={shape.tokens}, SmolLM2-135M, 1 thread"
    sampled = f"preflight {preflight.tokens} tokens, sampler {sampler.tokens}"
    extrapolated = extrapolated_seconds(preflight, shape.prompts)
    return [
        row(
            "preflight_batches_vs_sampler",
            ratio=batches,
            unit="x (tokens/s)",
            goal=f">= {GOAL}",
            met=batches >= GOAL,
            detail=f"{size}; preflight batches {preflight.tokens / preflight.batch_seconds:.0f} tok/s vs sampler "
            f"{sampler.tokens_per_s:.0f} tok/s; {sampled}",
            preflight_tokens=preflight.tokens,
            sampler_tokens=sampler.tokens,
            preflight_batch_s=round(preflight.batch_seconds, 2),
            sampler_s=round(sampler.seconds, 2),
        ),
        row(
            "preflight_whole_vs_sampler",
            ratio=whole,
            unit="x (tokens/s)",
            goal="info",
            met=None,
            detail=f"{size}; whole preflight {preflight.seconds:.1f} s ({preflight.tokens_per_s:.0f} tok/s, model "
            f"load and outputs included) vs sampler {sampler.seconds:.1f} s",
            preflight_s=round(preflight.seconds, 2),
        ),
        row(
            f"preflight_{SPEC_PROMPTS}x{shape.samples}_extrapolated",
            value=extrapolated,
            unit="s (extrapolated)",
            goal="info",
            met=None,
            detail=f"extrapolated, not run: fixed {preflight.seconds - preflight.batch_seconds:.1f} s + "
            f"{SPEC_PROMPTS}/{shape.prompts} x {preflight.batch_seconds:.1f} s of batches at T<={shape.tokens}",
        ),
    ]


def run(quick: bool) -> list[Row]:
    one_thread()
    shape = Shape(prompts=2, samples=8, tokens=32) if quick else Shape(prompts=20, samples=8, tokens=256)
    data = gsm8k_data()
    config = preflight_config(shape, data)
    preflight, policy = time_preflight(config)
    sampler = time_sampler(config, policy)
    return rows(shape, preflight, sampler, data)


if __name__ == "__main__":
    sys.exit(bench_main(run))
