"""The TRL engine's step (``grpolab train --engine trl``) against plain TRL's (``trl.GRPOTrainer``) at the same
settings: what grpolab's wrapper costs. Goal: engine / plain TRL <= 1.05.

Both sides are built from one ``TrainConfig`` (the embedded default model and task ``reverse``, P = 8, G = 4,
12 new tokens, estimator ``grpo``): the same ``GRPOConfig`` (``grpolab.train.trl_engine.arguments``), the same
prompts in the same order, the same reward function (the task's verifier), copies of one loaded model, one
process, one torch thread. The engine side is the engine's own trainer and callback, writing ``metrics.jsonl``
and ``rollouts/`` to a temporary run directory as a run does (it also gathers, re-estimates the advantages and
computes the starvation metrics); the plain side is ``trl.GRPOTrainer`` with no callback but the step clock.
Timed like ``_grpo_pair``: interleaved blocks, one ``trainer.train()`` call each, step times from
``on_step_begin`` to ``on_step_end`` plus, on the engine side, the logging that follows the step (its
``on_log``); the first step of every block is dropped and the ratio is of the medians.
"""

from __future__ import annotations

import copy
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from transformers.trainer_callback import PrinterCallback

from _common import Row, bench_main, median, one_thread, row
from _grpo_pair import StepClock

GOAL = 1.05


class _Clock(StepClock):
    """Step wall times: from ``on_step_begin`` to the end of the step's logging (``on_log``), or to
    ``on_step_end`` when nothing is logged."""

    def on_log(self, *args: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.times[-1] = time.perf_counter() - self._started


def _config(quick: bool) -> Any:
    from grpolab.config import TrainConfig

    return TrainConfig(engine="trl", prompts_per_step=8, group_size=4, max_new_tokens=12, advantage="grpo",
                       steps=200, lr=1e-6, checkpoint_every=0, eval_start=False, progress=False, threads=1)


class _Sides:
    """The engine's trainer (with its recorder writing into ``work``) and plain TRL's, on copies of one model."""

    def __init__(self, config: Any, work: Path) -> None:
        from trl import GRPOConfig, GRPOTrainer

        from grpolab.train.trl_engine.arguments import grpo_arguments
        from grpolab.train.trl_engine.run import TRLRun, _dataset, verifier_reward

        run = TRLRun(config, work / "engine", resume=False, on_step=None, start_eval_cache=None)
        plain_model = copy.deepcopy(run.policy.model)
        self.engine = run._trainer()
        self.recorder = run.recorder
        self.engine_clock = _Clock()
        self.engine.add_callback(self.engine_clock)
        arguments = grpo_arguments(config, output_dir=str(work / "plain"), num_processes=1,
                                   max_new_tokens=run.max_new_tokens)
        chat = bool(run.task.use_chat_template and getattr(run.policy.tokenizer, "chat_template", None))
        self.plain_clock = _Clock()
        self.plain = GRPOTrainer(
            model=plain_model, processing_class=copy.deepcopy(run.policy.tokenizer),
            args=GRPOConfig(**arguments, use_cpu=True), reward_funcs=verifier_reward(run.task.verifier),
            train_dataset=_dataset(run.task, config, chat), callbacks=[self.plain_clock],
        )
        self.plain.remove_callback(PrinterCallback)
        self.run = run

    def engine_block(self, steps: int) -> list[float]:
        self.engine_clock.times.clear()
        self.recorder.written = 0  # every block restarts at optimiser step 0
        self.engine.args.max_steps = steps
        self.engine.train()
        return list(self.engine_clock.times)

    def plain_block(self, steps: int) -> list[float]:
        self.plain_clock.times.clear()
        self.plain.args.max_steps = steps
        self.plain.train()
        return list(self.plain_clock.times)


def run(quick: bool) -> list[Row]:
    one_thread()
    warnings.filterwarnings("ignore", category=FutureWarning)
    blocks, per_block = (2, 4) if quick else (4, 6)
    engine: list[float] = []
    plain: list[float] = []
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-trl-") as tmp:
        sides = _Sides(_config(quick), Path(tmp))
        try:
            for _ in range(blocks):
                engine += sides.engine_block(per_block)[1:]
                plain += sides.plain_block(per_block)[1:]
        finally:
            sides.run.metrics_log.close()
            sides.run.release()
    ratio = median(engine) / median(plain)
    detail = (f"embedded, reverse, P=8, G=4, T<=12, grpo, 1 thread: engine {1000 * median(engine):.0f} ms vs "
              f"TRL {1000 * median(plain):.0f} ms per step ({len(engine)} steps each)")
    return [row("trl_engine_step_vs_trl", ratio=ratio, unit="x (engine/TRL)", goal="<= 1.05", met=ratio <= GOAL,
                detail=detail, engine_step_ms=round(1000 * median(engine), 1),
                trl_step_ms=round(1000 * median(plain), 1), steps_timed=len(engine))]


if __name__ == "__main__":
    sys.exit(bench_main(run))
