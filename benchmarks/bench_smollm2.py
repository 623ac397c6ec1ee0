"""One RL step on SmolLM2-135M-Instruct (GGUF, dequantised to float32) with LoRA r = 16: grpolab's
``Trainer.step`` against TRL's ``GRPOTrainer`` step, P = 8, G = 4, up to 64 new tokens, one thread.
Goal: grpolab / TRL <= 1/3.

The task is the real-model experiment's (docs/real-model-experiment.md): two-digit additions phrased as
questions, in the chat template, scored by the ``gsm8k`` verifier, temperature 0.7. SmolLM2 solves some
of them, so rewards are non-zero and both sides really update (the row reports grpolab's mean reward
and the share of completions it trained on). Precision: grpolab samples with its lean bfloat16 decoder
and runs the update under bfloat16 autocast with micro-batches of 16 (the experiment's settings); TRL
runs with ``bf16=True`` (autocast), its faster CPU setting here (see docs/benchmarks.md). Both sides put
LoRA (r = 16, alpha = 32, dropout 0) on grpolab's default ``lora_targets``. Quick: one block of 2 steps
per side (the first is a warm-up), full: 2 blocks of 3. Setup and timing: ``_grpo_pair``.
"""

from __future__ import annotations

import sys

from _common import Row, bench_main, row
from _grpo_pair import PairSettings, compare_steps, describe

GOAL = 1 / 3
TASK_OPTIONS = {"digits": [2, 2], "operators": "+", "operands": 2, "word_problems": True, "use_chat_template": True}
TRL_BF16 = True


def settings() -> PairSettings:
    return PairSettings(model="smollm2-135m", prompts=8, group_size=4, max_new_tokens=64, lora=True,
                        task_options=TASK_OPTIONS, verifier="gsm8k", temperature=0.7, micro_batch_size=16,
                        grpolab_dtype="bfloat16", trl_bf16=TRL_BF16)


def run(quick: bool) -> list[Row]:
    times = compare_steps(settings(), blocks=1 if quick else 2, steps_per_block=2 if quick else 3)
    info = describe(times)
    detail = (f"LoRA r=16; grpolab {info['grpolab_step_ms']} ms vs TRL {info['trl_step_ms']} ms per step "
              f"(P=8, G=4, T<=64, 1 thread, TRL bf16={TRL_BF16}); grpolab reward {info['grpolab_reward_mean']}, "
              f"trained {info['grpolab_trained_fraction']}")
    return [row("smollm2_rl_step_vs_trl", ratio=times.ratio, unit="x (grpolab/TRL)", goal="<= 0.333",
                met=times.ratio <= GOAL, detail=detail, **info)]


if __name__ == "__main__":
    sys.exit(bench_main(run))
