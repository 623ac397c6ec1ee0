"""The run shell both training engines share: everything around the steps, written once.

An engine is what differs between ``engine: grpolab`` (``grpolab.train.trainer``) and ``engine: trl``
(``grpolab.train.trl_engine``): how it samples, updates and checkpoints. ``RunShell`` is the rest, and both engines
call it:

* the run directory: made, probed writable, its lock held from start to end, refused when it holds something a
  fresh run would destroy (``grpolab.train.ownership``);
* the saved settings: checked on ``--resume`` against ``config.yaml`` and the newest checkpoint
  (``grpolab.train.settings``), then written;
* the task, checked against the step size, and the prompts of step s (``step_problems``, one formula for both
  engines, so that their runs of one seed train on the same prompts);
* the logs (``metrics.jsonl``, ``rollouts/``, ``eval.jsonl``), opened at the resume point after checking that they
  reach it;
* one step's record: the ``rollout/*`` figures (``rollout_figures``) and the rollout table (``rollout_table``);
* the warning of a run whose first steps have no gradient signal (``grpolab.train.no_signal``);
* the evaluations (``evaluate``) and the end of a run, finished (``finish``) or diverged (``diverged``).

Under ``accelerate launch`` (TRL engine) only the main process is the ``writer``: it alone holds the lock and
writes; the other processes' shells load the task and write nothing.

The metric keys a step writes are listed once, in ``grpolab.metric_keys``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grpolab.config import TrainConfig, save_config
from grpolab.errors import UserError
from grpolab.io import probe_writable
from grpolab.models import Policy
from grpolab.tasks import Problem, Task
from grpolab.train.divergence import RunDiverged, record_divergence
from grpolab.train.identity import run_identity
from grpolab.train.lifecycle import (
    RunResult,
    append_evaluation,
    check_logs_reach,
    evaluate_policy,
    finish_run,
    load_task_for,
    prepare_eval_log,
    write_task_summary,
)
from grpolab.train.lock import DirectoryLock, refuse_a_file
from grpolab.train.no_signal import NoSignalWatch
from grpolab.train.ownership import check_fresh_run_dir, refuse_planted_links, remove_run_files
from grpolab.train.runlog import MetricsLog, RolloutLog, open_backends, read_metrics
from grpolab.train.settings import check_resume_steps, checked_resume_settings, record_resume

__all__ = ["RunShell", "prepare_run_dir", "rollout_figures", "rollout_table", "step_problems", "step_seed"]


def step_seed(seed: int, step: int, round_: int = 0) -> int:
    """The seed of step ``step``'s draws (its prompts and, in grpolab's engine, its sampling); ``round_`` > 0:
    dynamic sampling's extra rounds. Derived from (seed, step), so a resumed run repeats an uninterrupted one."""
    return (seed * 1_000_003 + step * 7_919 + round_ * 104_729) % (2**63 - 1)


def step_problems(task: Task, config: TrainConfig, step: int, round_: int = 0) -> list[Problem]:
    """The ``prompts_per_step`` prompts of step ``step`` (1-based), round ``round_``: fresh ones from a task that
    streams its train prompts, else a draw without replacement from its train split."""
    if task.train_stream is not None:  # fresh prompts every step: nothing to memorise
        return task.train_stream(config.seed, step, round_, config.prompts_per_step)
    rng = np.random.default_rng(step_seed(config.seed, step, round_))
    pool = task.train
    return [pool[i] for i in rng.choice(len(pool), size=min(config.prompts_per_step, len(pool)), replace=False)]


def rollout_figures(rewards: np.ndarray, lengths: np.ndarray, truncated: Sequence[bool],
                    completions_generated: int, tokens_generated: int | None = None) -> dict[str, float]:
    """The ``rollout/*`` figures every engine writes for the batch it trains on: rewards and lengths [P, G]
    (a NaN reward: the verifier could not score it), ``truncated`` one flag per completion, problem-major;
    ``rollout/tokens_generated`` where the engine counts the completion tokens it sampled. A mean over no
    completions is left out rather than written as 0: the reward and accuracy when none was scored, the length
    and truncated share of an empty batch (dynamic sampling that found no informative group: ``rollout/groups``
    0)."""
    scored = rewards[~np.isnan(rewards)]
    figures = {} if tokens_generated is None else {"rollout/tokens_generated": float(tokens_generated)}
    if scored.size:
        figures.update({"rollout/reward_mean": float(scored.mean()), "rollout/accuracy": float((scored >= 0.5).mean())})
    if lengths.size:
        figures.update({"rollout/completion_length": float(lengths.mean()),
                        "rollout/truncated": float(np.mean(np.asarray(truncated, dtype=float)))})
    return {**figures, "rollout/groups": float(rewards.shape[0]),
            "rollout/completions_generated": float(completions_generated),
            "rollout/unscorable": float(np.isnan(rewards).sum())}


def rollout_table(step: int, prompt_ids: Sequence[str], texts: Sequence[str], rewards: Sequence[float],
                  advantages: Sequence[float], lengths: Sequence[int], truncated: Sequence[bool], *,
                  group_size: int) -> dict[str, list]:
    """One step's rollout table (``rollouts/step-NNNNNN.parquet``, schema in ``grpolab.train.runlog``): one row per
    completion, problem-major, ``prompt_ids`` one per completion; the advantage is each completion's (its token
    mean under per-token rewards)."""
    size = len(texts)
    return {"step": [step] * size, "prompt_id": [str(p) for p in prompt_ids],
            "sample": [i % group_size for i in range(size)], "completion": list(texts),
            "reward": [float(r) for r in rewards], "advantage": [float(a) for a in advantages],
            "length": [int(n) for n in lengths], "truncated": [bool(t) for t in truncated]}


def prepare_run_dir(run_dir: Path) -> None:
    """Make ``run_dir`` and check it is writable, or refuse in one line."""
    refuse_a_file(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_writable(run_dir)
    except OSError as error:
        raise UserError(f"cannot write to output directory {run_dir} ({error.strerror}); choose a writable --out") \
            from None


class RunShell:
    """One run's directory, settings, task, logs, evaluations and end, for whichever engine trains it.

    The lifecycle, in order: construct (the directory is made and locked), ``check_fresh``, ``resume_settings``
    (resume only), ``load_task``, the engine's own set-up (model, checkpoint), ``open_logs``, then per step
    ``record_step`` and ``evaluate``, and at the end ``finish`` or ``diverged``; ``release`` in a ``finally``.

    Args:
        config: the run's settings.
        run_dir: its directory.
        command: the command named in the lock's owner file (``grpolab train``).
        writer: whether this process writes the run directory (False: accelerate's other processes).
    """

    def __init__(self, config: TrainConfig, run_dir: str | Path, *, command: str, writer: bool = True) -> None:
        self.config, self.run_dir, self.writer = config, Path(run_dir), writer
        self.lock: DirectoryLock | None = None
        self.task: Task | None = None
        self.identity: dict[str, str] = {}  # of the data and local model, when the task was loaded (task.json)
        self.max_new_tokens = 0
        self.metrics_log: MetricsLog | None = None
        self.rollout_log: RolloutLog | None = None
        self.resumed_changes: dict[str, list] = {}
        self.no_signal = NoSignalWatch(config.group_size, stop=config.stop_when_dead)
        if writer:
            lock = DirectoryLock(self.run_dir, command)  # made first: it notes the folders this run creates
            prepare_run_dir(self.run_dir)
            self.lock = lock.acquire()

    def release(self) -> None:
        """Close the metrics log and give up the lock (each a no-op when done already; the lock is given up even when
        closing the log fails, as on a full disk)."""
        try:
            self._close_metrics()
        finally:
            if self.lock is not None:
                self.lock.release()

    def _close_metrics(self) -> None:
        log, self.metrics_log = self.metrics_log, None  # closed once, even when closing fails
        if log is not None:
            log.close()

    # ------------------------------------------------------------------ before the model loads

    def check_fresh(self, *, resume: bool, overwrite: bool, has_checkpoint: bool) -> None:
        """Refuse (or with ``overwrite`` clear) a directory that a fresh run would destroy. A resume with a
        checkpoint or saved settings is not fresh; ``has_checkpoint``: the engine found a checkpoint of its own."""
        if not self.writer or (resume and (has_checkpoint or (self.run_dir / "config.yaml").exists())):
            return
        if has_checkpoint:
            if not overwrite:
                raise UserError(f"{self.run_dir} already holds a run; pass --resume to continue it; choose a new "
                                "--out, or pass --overwrite to replace the run (files grpolab did not write are kept)")
            remove_run_files(self.run_dir)
        check_fresh_run_dir(self.run_dir, overwrite=overwrite, config=self.config)

    def resume_settings(self, *, has_checkpoint: bool) -> TrainConfig | None:
        """The settings the run was trained under, checked against this command's (``checked_resume_settings``);
        refuses a run with checkpoints whose settings are lost, rather than train it under the flags' defaults."""
        refuse_planted_links(self.run_dir)  # before anything is read or written there
        saved = checked_resume_settings(self.run_dir, self.config)
        if saved is None and has_checkpoint:
            raise UserError(f"{self.run_dir} has checkpoints but no config.yaml, so the settings it was trained under "
                            "are unknown; restore config.yaml from a copy, or choose a new --out")
        return saved

    def load_task(self, task: Task | None = None) -> Task:
        """The run's task (``task``, or ``load_task_for`` the config), refused when it cannot fill a step (rather
        than train on fewer prompts than asked); sets ``max_new_tokens``."""
        config = self.config
        task = task or load_task_for(config)
        if task.train_stream is None and config.prompts_per_step > len(task.train):
            raise UserError(f"prompts_per_step {config.prompts_per_step} is more than the {len(task.train)} train "
                            f"prompts of task {task.name!r}; lower --prompts-per-step (or give the task more prompts)")
        self.task = task
        self.identity = run_identity(config)  # the data as loaded: a sweep compares it with its own (task.json)
        self.max_new_tokens = config.max_new_tokens or task.max_new_tokens
        return task

    # ------------------------------------------------------------------ the logs

    def open_logs(self, *, resume: bool, saved: TrainConfig | None, start_step: int) -> None:
        """Check that the logs reach the checkpoint at ``start_step``, record the resume, write the settings and
        the task summary, and open the logs at the resume point (a no-op on a process that does not write)."""
        if not self.writer:
            return
        config, run_dir = self.config, self.run_dir
        if saved is not None:  # a refused --steps is said alone, before any warning about the logs
            check_resume_steps(run_dir, saved, config, start_step)
        if start_step:  # before training (and before an extension drops summary.json): no gap in the logs
            check_logs_reach(run_dir, config, start_step)
        self.resumed_changes = {} if saved is None else record_resume(run_dir, saved, config, start_step,
                                                                      task=self.task)
        extended = "steps" in self.resumed_changes
        if extended:  # a finished run that is extended is no longer finished
            (run_dir / "summary.json").unlink(missing_ok=True)
        save_config(config, run_dir / "config.yaml")
        write_task_summary(self.task, run_dir, identity=self.identity)
        resume_from = start_step + 1 if resume else None
        self.metrics_log = MetricsLog(run_dir / "metrics.jsonl", resume_from_step=resume_from,
                                      backends=open_backends(config, run_dir, resume=resume))
        if start_step:  # the first steps' signal is judged over the steps before the checkpoint too
            self.no_signal.resume(start_step, read_metrics(run_dir / "metrics.jsonl"))
        self.rollout_log = RolloutLog(run_dir / "rollouts", resume_from_step=resume_from)
        # with no checkpoint the start evaluation is redone, so its row must go too
        prepare_eval_log(run_dir / "eval.jsonl", resume_from_step=resume_from if start_step else None,
                         extended=extended)

    def record_step(self, step: int, metrics: dict[str, Any], *, sync: bool = True) -> None:
        """Append step ``step``'s row to ``metrics.jsonl`` (flushed; fsynced unless ``sync`` is False); after the
        first steps, warn when none of them had a gradient signal (``grpolab.train.no_signal``)."""
        self.metrics_log.write(step, metrics, sync=sync)
        self.no_signal.observe(step, metrics)

    @property
    def stopping(self) -> bool:
        """Whether the run ends at this step for want of signal (``--stop-when-dead``)."""
        return self.no_signal.stopped_at is not None

    def sync_logs(self) -> None:
        """fsync ``metrics.jsonl`` (rows written with ``sync=False`` are flushed but not yet durable)."""
        if self.metrics_log is not None:
            self.metrics_log.sync()

    def write_rollouts(self, step: int, table: dict[str, list]) -> None:
        """Write step ``step``'s rollout table (``rollout_table``)."""
        self.rollout_log.write(step, table)

    # ------------------------------------------------------------------ evaluations and the end

    def evaluate(self, policy: Policy, step: int, phase: str, *, completions_generated: int,
                 cache_dir: Path | None = None) -> dict[str, Any]:
        """Evaluate ``policy`` on the config's ``eval_split`` and append the row to ``eval.jsonl``; ``phase``:
        start, step or end; ``cache_dir``: a sweep's shared start evaluations (start only)."""
        result = evaluate_policy(policy, self.task, self.config, max_new_tokens=self.max_new_tokens,
                                 cache_dir=cache_dir if phase == "start" else None)
        row = {"step": step, "phase": phase, "completions_generated": completions_generated, **result}
        append_evaluation(self.run_dir, row)
        return row

    def evaluation_due(self, step: int) -> bool:
        """Whether step ``step`` ends with an evaluation during the run (``eval_every``; the end one aside)."""
        every = self.config.eval_every
        return bool(every) and step % every == 0 and step < self.config.steps

    def finish(self, policy: Policy, metrics: dict[str, Any], *, sampler: dict[str, Any] | None = None,
               compute: dict[str, Any] | None = None) -> RunResult:
        """Close the metrics log, save ``final/`` and write ``summary.json`` (``finish_run``); ``sampler``: how the
        run sampled (``engine.sampler_path.SamplerRecord.summary``), where the engine knows; ``compute``: the run's
        compute totals (``grpolab.train.compute``)."""
        self._close_metrics()
        return finish_run(self.run_dir, policy, self.config, metrics, sampler=sampler, compute=compute,
                          ended=self.no_signal.summary_fields())

    def diverged(self, step: int, reason: str, metrics: dict[str, Any]) -> RunDiverged:
        """Close the metrics log, write the diverged run's ``summary.json`` and return the error that ends it."""
        self._close_metrics()
        if not self.writer:
            return RunDiverged(f"the run diverged at step {step}: {reason}", step)
        return record_divergence(self.run_dir, step, reason, lr=self.config.lr, steps=self.config.steps,
                                 metrics=metrics)
