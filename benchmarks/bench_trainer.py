"""Trainer step (sample + score + update) on the embedded default: grpolab's ``Trainer.step`` against TRL's
``GRPOTrainer`` step, P = 8, G = 4, 16 new tokens, one thread. Goal: grpolab / TRL <= 1/3.

How the two are set up and timed: ``_grpo_pair``. The task is ``arith``, so the model is the embedded
model trained for it (``embedded-arith``; the default ``embedded`` model is trained for ``reverse`` and
earns no arith rewards, which would leave grpolab nothing to update). Without it, a stand-in of its
shape with random weights is used (the row's detail says which).
"""

from __future__ import annotations

import sys

from _common import Row, bench_main, default_model, model_label, row
from _grpo_pair import PairSettings, compare_steps, describe
from grpolab.models import EMBEDDED_ARITH, embedded_model_dir

GOAL = 1 / 3


def run(quick: bool) -> list[Row]:
    model, is_embedded = default_model()
    if is_embedded and (embedded_model_dir(EMBEDDED_ARITH) / "config.json").is_file():
        model = EMBEDDED_ARITH
    settings = PairSettings(model=model, prompts=8, group_size=4, max_new_tokens=16)
    times = compare_steps(settings, blocks=2 if quick else 3, steps_per_block=3 if quick else 5)
    info = describe(times)
    label = model if is_embedded else model_label(False)
    detail = (f"{label}; grpolab {info['grpolab_step_ms']} ms vs TRL {info['trl_step_ms']} ms "
              f"per step (P=8, G=4, T<=16, 1 thread)")
    return [row("trainer_step_vs_trl", ratio=times.ratio, unit="x (grpolab/TRL)", goal="<= 0.333",
                met=times.ratio <= GOAL, detail=detail, **info)]


if __name__ == "__main__":
    sys.exit(bench_main(run))
