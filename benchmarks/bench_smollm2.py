"""SmolLM2-135M-Instruct (GGUF, dequantised to float32) with LoRA r = 16: grpolab's ``Trainer.step``
against TRL's ``GRPOTrainer`` step, P = 4, G = 4, 64 new tokens, one thread (quick: 8 tokens, one block
of 3 steps per side, so that it fits the two-minute quick suite).
Goal: no slower than TRL (grpolab / TRL <= 1.0).

Both sides put LoRA (r = 16, alpha = 32, dropout 0) on the same modules: grpolab's default
``lora_targets`` that exist in the model. Setup and timing: ``_grpo_pair``. Loading takes ~12 s.
"""

from __future__ import annotations

import sys

from _common import Row, bench_main, row
from _grpo_pair import PairSettings, compare_steps, describe

GOAL = 1.0


def run(quick: bool) -> list[Row]:
    tokens = 8 if quick else 64
    settings = PairSettings(model="smollm2-135m", prompts=4, group_size=4, max_new_tokens=tokens, lora=True)
    times = compare_steps(settings, blocks=1 if quick else 3, steps_per_block=3 if quick else 4)
    info = describe(times)
    detail = (f"LoRA r=16; grpolab {info['grpolab_step_ms']} ms vs TRL {info['trl_step_ms']} ms per step "
              f"(P=4, G=4, T<={tokens}, 1 thread)")
    return [row(f"smollm2_lora_step_vs_trl[T={tokens}]", ratio=times.ratio, unit="x (grpolab/TRL)",
                goal="<= 1.0", met=times.ratio <= GOAL, detail=detail, **info)]


if __name__ == "__main__":
    sys.exit(bench_main(run))
