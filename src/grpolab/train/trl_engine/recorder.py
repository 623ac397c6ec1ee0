"""What a TRL-engine run records, as a grpolab run does: each step's row of ``metrics.jsonl`` (grpolab's keys,
TRL's own beside them under ``trl/``), its rollouts (``rollouts/step-NNNNNN.parquet``, the schema of
``grpolab.train.runlog``), evaluations during the run, the save at the last step, and divergence.

``RecordingGRPOTrainer`` is grpolab's TRL subclass (``grpolab.integrations.trl.GRPOTrainer``) that also
gathers, on every process, what the logs need of each generation batch (prompt ids, completion texts, lengths,
truncation) and times the generation; ``RunRecorder`` is a ``TrainerCallback`` that writes the logs on the main
process only. Every process runs the same collectives, in the same order. A tensor read for the logs crosses to the
host through ``grpolab.devices.to_host`` (the trainer's ``last_groups`` are host tensors already; this keeps the
recorder right whatever it is handed).

Departures from grpolab's engine: a row of ``metrics.jsonl`` is flushed at once (a killed process loses
nothing) and fsynced with each checkpoint, not at every step (an fsync per step cost 4-5% of a CPU step here);
each step's rollout table is written on a writer thread (waited for at each checkpoint and at the end);
``loss/total`` is TRL's loss (policy term plus beta * KL); ``loss/entropy`` is TRL's mean entropy of the trained
tokens (every key's meaning: ``grpolab.metric_keys``); ``perf/update_time`` is the step time less the generation time.
With num_iterations mu > 1 a grpolab step is mu optimiser steps; its row has the last one's loss figures.

Compute (``grpolab.train.compute``): a row records the optimiser steps (TRL's ``global_step``, which its checkpoints
restore) and the completion tokens the step sampled; TRL reports neither the rows and tokens that reached its
backward pass nor a sampled-token count across its checkpoints, so those counters are left out of the rows and
written as null in summary.json with the reason (``compute_summary``), never assumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from grpolab.devices import to_host
from grpolab.integrations.trl import GRPOTrainer
from grpolab.metric_keys import COMPUTE, lookup, trl_names
from grpolab.train.divergence import non_finite_metric
from grpolab.train.shell import RunShell, rollout_figures, rollout_table
from grpolab.train.trl_engine.checkpoints import LAYOUT, prune, record_state, seal

__all__ = ["RecordingGRPOTrainer", "RolloutRecord", "RunRecorder", "compute_summary"]

_TRL_NAMES = trl_names()  # TRL's logged name -> grpolab's metric name (grpolab.metric_keys)


@dataclass
class RolloutRecord:
    """Every process's completions of one generation batch, problem-major (B = P * G rows)."""

    prompt_ids: list[str]
    texts: list[str]
    truncated: list[bool]
    seconds: float


class RecordingGRPOTrainer(GRPOTrainer):
    """grpolab's TRL subclass that keeps the newest generation batch's ``RolloutRecord`` (``last_record``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.last_record: RolloutRecord | None = None
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        from accelerate.utils import gather_object

        started = time.perf_counter()
        output = super()._generate_and_score_completions(inputs)
        completion_ids = output["completion_ids"]
        eos = torch.tensor(self.eos_token_ids, device=completion_ids.device)
        truncated = ~torch.isin(completion_ids, eos).any(dim=1)  # [B_local]: no end-of-sequence token
        all_truncated = self.accelerator.gather(truncated.to(torch.int32))  # [B]
        prompt_ids = gather_object([str(row["prompt_id"]) for row in inputs])
        completions = list(self._logs["completion"])[-len(prompt_ids):]  # TRL gathered them just now
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        self.last_record = RolloutRecord(prompt_ids, texts, [bool(t) for t in to_host(all_truncated).tolist()],
                                         time.perf_counter() - started)
        return output


class RunRecorder(TrainerCallback):
    """Writes a TRL-engine run's logs as the run goes (main process only) and stops a diverged run.

    Args:
        trainer: the ``RecordingGRPOTrainer`` (set after it is built).
        iterations: mu, optimiser steps per grpolab step.
        steps: the grpolab steps of the run.
        shell: the run's shell (on every process; only the main process's shell writes).
        evaluate: ``fn(step)`` evaluating at a step (when the shell's ``evaluation_due``; called on every process).
        on_step: grpolab's ``fn(step, metrics)`` (the progress bar and a sweep's messages).
    """

    def __init__(self, *, iterations: int, steps: int, shell: RunShell, evaluate: Callable[[int], None],
                 on_step: Callable[[int, dict[str, Any]], None] | None) -> None:
        self.trainer: RecordingGRPOTrainer | None = None
        self.iterations, self.steps = iterations, steps
        self.shell = shell
        self.evaluate, self.on_step = evaluate, on_step
        self.written = 0
        self.last_metrics: dict[str, Any] = {}
        self.diverged: tuple[int, str] | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grpolab-rollouts")
        self._pending: Future | None = None
        self._step_started = time.perf_counter()

    def grpolab_step(self, global_step: int) -> int | None:
        """The grpolab step that optimiser step ``global_step`` completes, or None mid-step."""
        return global_step // self.iterations if global_step % self.iterations == 0 else None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.iterations == 0:
            self._step_started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        step = self.grpolab_step(state.global_step)
        if step == self.steps and args.save_strategy != "no":
            control.should_save = True  # the last step is always saved, so a run can be extended
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.drain()  # a checkpoint's steps are in rollouts/ and durable in metrics.jsonl too
        if self.shell.writer:  # TRL's save has returned: seal what it wrote, then rotate (trl_engine.checkpoints)
            checkpoint = Path(args.output_dir) / LAYOUT.name(state.global_step)
            record_state(checkpoint, self.shell.config, self.trainer.success_window_state())
            seal(checkpoint)
            prune(self.shell.run_dir, self.shell.config.keep_checkpoints)

    def drain(self) -> None:
        """Wait for the rollout tables being written and fsync ``metrics.jsonl``."""
        if self._pending is not None:
            self._pending.result()  # re-raises a failed write
            self._pending = None
        self.shell.sync_logs()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        step = self.grpolab_step(state.global_step)
        logs = logs or {}
        if step is None or step <= self.written or "loss" not in logs:
            return control
        self.written = step
        problem = non_finite_metric({"loss/total": logs.get("loss"), "loss/grad_norm": logs.get("grad_norm")})
        if problem is not None:
            self.diverged = (step, problem)
            control.should_training_stop, control.should_save = True, False
            return control
        if self.shell.writer:
            self.last_metrics = self._row(step, logs)
            self.shell.record_step(step, self.last_metrics, sync=False)  # flushed; fsynced with each checkpoint
            self._write_rollouts(step)
            if self.on_step is not None:
                self.on_step(step, self.last_metrics)
        if self.shell.evaluation_due(step):
            self.evaluate(step)
        return control

    def _row(self, step: int, logs: dict[str, Any]) -> dict[str, Any]:
        groups, record = self.trainer.last_groups, self.trainer.last_record
        rewards, lengths = to_host(groups.rewards).double().numpy(), to_host(groups.lengths).numpy()
        step_time = time.perf_counter() - self._step_started
        # no dynamic sampling: B completions per step
        row: dict[str, Any] = {**rollout_figures(rewards, lengths, record.truncated, step * rewards.size),
                               **groups.starvation}
        row.update({ours: float(logs[theirs]) for theirs, ours in _TRL_NAMES.items() if _number(logs.get(theirs))})
        row.update({"compute/optimizer_steps": float(self.iterations),
                    "compute/optimizer_steps_total": float(step * self.iterations),  # TRL's global_step
                    "compute/sampled_tokens": float(lengths.sum())})
        row.update({"perf/step_time": step_time, "perf/rollout_time": record.seconds,
                    "perf/update_time": max(step_time - record.seconds, 0.0)})
        row.update({f"trl/{k}": float(v) for k, v in logs.items() if _number(v) and not k.startswith("starvation/")})
        return row

    def _write_rollouts(self, step: int) -> None:
        """Write the step's rollout table on the writer thread (one at a time, in step order), so that the
        Parquet encoding overlaps the next step; ``drain`` waits for it."""
        groups, record = self.trainer.last_groups, self.trainer.last_record
        table = rollout_table(step, record.prompt_ids, record.texts,
                              to_host(groups.rewards).reshape(-1).float().tolist(),
                              to_host(groups.advantages).reshape(-1).float().tolist(),
                              to_host(groups.lengths).reshape(-1).int().tolist(), record.truncated,
                              group_size=groups.rewards.shape[1])
        if self._pending is not None:
            self._pending.result()
        self._pending = self._writer.submit(self.shell.write_rollouts, step, table)


def compute_summary(optimizer_steps: int, completions: int) -> dict[str, Any]:
    """summary.json's ``compute`` for a TRL-engine run: its optimiser steps and completions sampled, and null for
    each counter TRL does not report, with the reason (``unavailable``: counter -> the metric table's reason)."""
    recorded = {"optimizer_steps": optimizer_steps}
    unavailable = {name: lookup(total).reason for name, (_, total) in COMPUTE.items() if name not in recorded}
    return {**{name: recorded.get(name) for name in COMPUTE}, "sampled_completions": completions,
            "counted_from_step": 0, "unavailable": unavailable}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)

