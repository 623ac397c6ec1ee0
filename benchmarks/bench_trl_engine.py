"""The TRL engine's step (``grpolab train --engine trl``) against plain TRL's (``trl.GRPOTrainer``) at the same
settings: what grpolab's wrapper costs. Goal: engine / plain TRL <= 1.05.

Two rows, the embedded default model and task ``reverse``, estimator ``grpo``, one torch thread:

* ``trl_engine_step_vs_trl``: the tiny step (P = 8, G = 4, 12 new tokens, ~50-100 ms), where grpolab's fixed
  per-step work weighs most: the worst case.
* ``trl_engine_step_vs_trl_large``: a larger step (P = 32, G = 8, 64 new tokens), several times the work per
  step, the same fixed work.

Both sides of a row are built from one ``TrainConfig``: the same ``GRPOConfig``
(``grpolab.train.trl_engine.arguments``, so the same ``logging_steps=1`` and TRL's own logging on both sides),
the same prompts in the same order, the same reward function (the task's verifier), copies of one loaded model,
one process. The engine side is the engine's own trainer and callback, writing ``metrics.jsonl`` and
``rollouts/`` to a temporary run directory as a run does (it also gathers, re-estimates the advantages and
computes the starvation metrics); the plain side is ``trl.GRPOTrainer`` with no callback but the step clock
(``PrinterCallback`` removed on both sides). Every block of a side starts from the same seed
(``transformers.set_seed``), so both sides sample the same completions (the same lengths, the same work): without
it they drew from one global generator in turn and their batches differed. Timed like ``_grpo_pair``: interleaved
blocks, one ``trainer.train()`` call each, the order of the sides rotated and reversed from block to block so
that a drift of the machine's load hits every side alike; step times from ``on_step_begin`` to the end of the
step's logging (``on_log``, where TRL's logging and grpolab's writer run); the first step of every block is
dropped and the ratio is of the medians of wall times.

Also reported: ``cpu_ratio``, the same ratio of process CPU time (every thread, so the rollout writer's thread
counts; CPU stolen by other processes does not); ``control_ratio``, a second plain TRL trainer against the first
(interleaved the same way: what two identical sides differ by on this machine, the noise floor of ``ratio``);
and ``grpolab_ms``, grpolab's own work measured directly in each engine step: the subclass's
``_generate_and_score_completions`` less TRL's inside it, plus the recorder's ``on_log``.
"""

from __future__ import annotations

import copy
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, set_seed
from transformers.trainer_callback import PrinterCallback

from _common import Row, bench_main, median, one_thread, row

GOAL = 1.05


@dataclass(frozen=True)
class Setting:
    """One row: its name, P prompts x G completions, T new tokens, and (blocks, steps per block) of a full and a
    quick run."""

    name: str
    prompts: int
    group_size: int
    max_new_tokens: int
    full: tuple[int, int]
    quick: tuple[int, int]


SETTINGS = (
    Setting("trl_engine_step_vs_trl", 8, 4, 12, full=(8, 6), quick=(4, 4)),
    Setting("trl_engine_step_vs_trl_large", 32, 8, 64, full=(6, 5), quick=(2, 3)),
)


class _Clock(TrainerCallback):
    """Per step: wall and process-CPU seconds from ``on_step_begin`` to the end of the step's logging
    (``on_log`` with a loss), or to ``on_step_end`` when nothing is logged."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._started = (0.0, 0.0)

    def _elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self._started[0], time.process_time() - self._started[1]

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        self._started = (time.perf_counter(), time.process_time())

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        wall, cpu = self._elapsed()
        self.wall.append(wall)
        self.cpu.append(cpu)

    def on_log(self, *args: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs and self.wall:
            self.wall[-1], self.cpu[-1] = self._elapsed()

    def take(self) -> tuple[list[float], list[float]]:
        """The block's (wall, cpu) step times less the first step, and a fresh start."""
        wall, cpu = self.wall[1:], self.cpu[1:]
        self.wall, self.cpu = [], []
        return wall, cpu


class _OwnWork:
    """grpolab's own seconds per engine step: the subclass around TRL's ``_generate_and_score_completions`` and
    the recorder's ``on_log`` (instance wrappers; TRL's method is timed through a class wrapper, ``trl_timed``)."""

    def __init__(self, trainer: Any, recorder: Any) -> None:
        self.seconds: list[float] = []
        self._trl = 0.0
        outer, on_log = trainer._generate_and_score_completions, recorder.on_log

        def generate(inputs: Any) -> Any:
            started, self._trl = time.perf_counter(), 0.0
            output = outer(inputs)
            self.seconds.append(time.perf_counter() - started - self._trl)
            return output

        def log(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = on_log(*args, **kwargs)
            if self.seconds:
                self.seconds[-1] += time.perf_counter() - started
            return result

        trainer._generate_and_score_completions, recorder.on_log = generate, log

    def add_trl(self, seconds: float) -> None:
        self._trl += seconds


@contextmanager
def trl_timed(own: list[_OwnWork]) -> Iterator[None]:
    """Time TRL's own ``_generate_and_score_completions`` (on both sides alike) for ``_OwnWork``."""
    from trl import GRPOTrainer

    original = GRPOTrainer._generate_and_score_completions

    def timed(trainer: Any, inputs: Any) -> Any:
        started = time.perf_counter()
        output = original(trainer, inputs)
        for work in own:
            work.add_trl(time.perf_counter() - started)
        return output

    GRPOTrainer._generate_and_score_completions = timed
    try:
        yield
    finally:
        GRPOTrainer._generate_and_score_completions = original


def _config(setting: Setting) -> Any:
    from grpolab.config import TrainConfig

    return TrainConfig(engine="trl", prompts_per_step=setting.prompts, group_size=setting.group_size,
                       max_new_tokens=setting.max_new_tokens, advantage="grpo", steps=200, lr=1e-6,
                       checkpoint_every=0, eval_start=False, progress=False, threads=1)


class _Plain:
    """Plain ``trl.GRPOTrainer`` on a copy of the run's model, with the run's ``GRPOConfig``, prompts and reward."""

    def __init__(self, run: Any, output_dir: Path) -> None:
        from trl import GRPOConfig, GRPOTrainer

        from grpolab.train.trl_engine.arguments import grpo_arguments
        from grpolab.train.trl_engine.run import _dataset, verifier_reward

        arguments = grpo_arguments(run.config, output_dir=str(output_dir), num_processes=1,
                                   max_new_tokens=run.max_new_tokens)
        chat = bool(run.task.use_chat_template and getattr(run.policy.tokenizer, "chat_template", None))
        self.clock = _Clock()
        self.trainer = GRPOTrainer(
            model=copy.deepcopy(run.policy.model), processing_class=copy.deepcopy(run.policy.tokenizer),
            args=GRPOConfig(**{**arguments, "use_cpu": True}), reward_funcs=verifier_reward(run.task.verifier),
            train_dataset=_dataset(run.task, run.config, chat), callbacks=[self.clock],
        )
        self.trainer.remove_callback(PrinterCallback)

    def block(self, steps: int) -> tuple[list[float], list[float]]:
        self.trainer.args.max_steps = steps
        self.trainer.train()
        return self.clock.take()


class _Sides:
    """The engine's trainer (with its recorder writing into ``work``), plain TRL's, and a second plain TRL (the
    control: what two identical sides differ by on this machine), on copies of one model."""

    def __init__(self, config: Any, work: Path) -> None:
        from grpolab.train.trl_engine.run import TRLRun

        self.run = TRLRun(config, work / "engine", resume=False, on_step=None, start_eval_cache=None)
        self.plain, self.control = _Plain(self.run, work / "plain"), _Plain(self.run, work / "control")
        self.engine = self.run._trainer()
        self.recorder = self.run.recorder
        self.engine_clock = _Clock()
        self.engine.add_callback(self.engine_clock)
        self.own = _OwnWork(self.engine, self.recorder)
        self.lengths: list[float] = []  # the engine's mean completion length (tokens) of each step

    def block(self, side: str, steps: int) -> tuple[list[float], list[float]]:
        """One ``train()`` call of ``side`` (engine, plain or control): its (wall, cpu) step times."""
        if side != "engine":
            return getattr(self, side).block(steps)
        self.recorder.written = 0  # every block restarts at optimiser step 0
        self.engine.args.max_steps = steps
        self.engine.train()
        self.lengths += [h["completions/mean_length"] for h in self.engine.state.log_history
                         if "completions/mean_length" in h]
        return self.engine_clock.take()

    def close(self) -> None:
        self.recorder.drain()
        self.run.shell.release()  # the run shell's metrics log and lock


SIDES = ("engine", "plain", "control")


def _order(block: int) -> tuple[str, ...]:
    """The sides' order in ``block``: rotated each block and reversed every other one, so that a drift of the
    machine's load hits every side alike."""
    shift = block % len(SIDES)
    order = SIDES[shift:] + SIDES[:shift]
    return order[::-1] if block % 2 else order


def _measure(setting: Setting, quick: bool) -> dict[str, Any]:
    """Interleaved blocks of one setting: each side's step times (wall, cpu) and grpolab's own work."""
    blocks, per_block = setting.quick if quick else setting.full
    times: dict[str, list[float]] = {key: [] for side in SIDES for key in (side, f"{side}_cpu")}
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-trl-") as tmp:
        sides = _Sides(_config(setting), Path(tmp))
        try:
            with trl_timed([sides.own]):
                for block in range(blocks):
                    for side in _order(block):
                        set_seed(1000 + block)  # the same sampling on every side: the same completions
                        wall, cpu = sides.block(side, per_block)
                        times[side] += wall
                        times[f"{side}_cpu"] += cpu
            times["own"] = [s for block in _blocks(sides.own.seconds, per_block) for s in block[1:]]
            times["length"] = sides.lengths
        finally:
            sides.close()
    return times


def _blocks(values: list[float], size: int) -> list[list[float]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


def _row(setting: Setting, times: dict[str, Any]) -> Row:
    engine, plain = median(times["engine"]), median(times["plain"])
    ratio = engine / plain
    cpu_ratio = median(times["engine_cpu"]) / median(times["plain_cpu"])
    control = median(times["control"]) / plain
    own = median(times["own"])
    detail = (f"embedded, reverse, P={setting.prompts}, G={setting.group_size}, T<={setting.max_new_tokens}, grpo, "
              f"1 thread, completions {median(times['length']):.1f} tokens (median): engine {1000 * engine:.0f} ms "
              f"vs TRL {1000 * plain:.0f} ms per step ({len(times['engine'])} steps each); CPU-time ratio "
              f"{cpu_ratio:.3f}; control (TRL vs TRL) {control:.3f}; grpolab's own work {1000 * own:.1f} ms "
              f"per step ({100 * own / plain:.1f}% of TRL's step)")
    return row(setting.name, ratio=ratio, unit="x (engine/TRL)", goal="<= 1.05", met=ratio <= GOAL, detail=detail,
               engine_step_ms=round(1000 * engine, 1), trl_step_ms=round(1000 * plain, 1),
               cpu_ratio=round(cpu_ratio, 4), control_ratio=round(control, 4), grpolab_ms=round(1000 * own, 2),
               steps_timed=len(times["engine"]))


def run(quick: bool) -> list[Row]:
    one_thread()
    warnings.filterwarnings("ignore", category=FutureWarning)
    return [_row(setting, _measure(setting, quick)) for setting in SETTINGS]


if __name__ == "__main__":
    sys.exit(bench_main(run))
