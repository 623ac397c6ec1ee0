"""One run of ``grpolab train --engine trl``: TRL 1.16's ``GRPOTrainer`` trains, grpolab does the rest.

TRL generates, computes the loss and steps the optimiser (on whatever device and processes ``accelerate``
gives it, with vLLM if asked); grpolab loads the model, builds the task's prompts, scores with the task's
verifier as TRL's reward function, makes the advantages with its estimator, evaluates with its own
``evaluate`` at the start and the end, and writes the run directory a grpolab run writes (``config.yaml``,
``metrics.jsonl``, ``rollouts/``, ``eval.jsonl``, ``summary.json``, ``final/``). Under ``accelerate launch``
every process trains; only the main one holds the run directory's lock and writes it.

Devices: ``device`` cpu keeps TRL on the CPU (``use_cpu``); auto or cuda give TRL accelerate's device (with one
process, the GPU ``device`` names; under ``accelerate launch``, each process's own). grpolab's evaluation samples on
the model's device with grpolab's sampler, and every tensor TRL hands to grpolab crosses to the host in
``grpolab.devices.to_host``.

Departures from grpolab's engine:

* The prompts of step s are the ones grpolab's engine draws at step s (same seed, same formula), handed to TRL
  as a dataset in step order that TRL does not shuffle, drawn lazily as TRL reads them; TRL's sampling itself
  is its own (its generator and, with ``use_vllm``, vLLM's), so runs of the two engines differ completion by completion.
* Checkpoints are TRL's (``checkpoints/checkpoint-N``, N optimiser steps, with its optimiser, scheduler and RNG
  state); ``--resume`` continues from the newest complete one with ``resume_from_checkpoint``. The resumed run
  is close to, but not bit-identical with, an uninterrupted one.
* A run whose loss or gradient norm turns non-finite stops at that step, saves nothing more, writes
  ``summary.json`` with status ``diverged`` and ends with one line (exit code 2).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from grpolab import devices, verifiers
from grpolab.config import TrainConfig, save_config
from grpolab.errors import UserError
from grpolab.models import Policy, load_policy
from grpolab.rewards import check_scores, score_batch
from grpolab.tasks import Problem, Task
from grpolab.train.divergence import RunDiverged, record_divergence
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
from grpolab.train.lock import DirectoryLock
from grpolab.train.ownership import check_fresh_run_dir
from grpolab.train.runlog import MetricsLog, RolloutLog, open_backends, read_metrics
from grpolab.train.settings import check_resume, load_saved_config, record_resume
from grpolab.train.trl_engine.arguments import check_supported, grpo_arguments, lora_config

__all__ = ["latest_checkpoint", "run_trl", "step_problems"]

StepCallback = Callable[[int, dict[str, Any]], None]
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def step_problems(task: Task, config: TrainConfig, step: int) -> list[Problem]:
    """The P prompts of step ``step`` (1-based): those grpolab's own engine draws (``Trainer._choose_problems``)."""
    if task.train_stream is not None:
        return task.train_stream(config.seed, step, 0, config.prompts_per_step)
    rng = np.random.default_rng((config.seed * 1_000_003 + step * 7_919) % (2**63 - 1))
    pool = task.train
    return [pool[i] for i in rng.choice(len(pool), size=min(config.prompts_per_step, len(pool)), replace=False)]


def _rows(task: Task, config: TrainConfig, chat: bool, steps: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """The prompts of steps 1 to ``steps`` in step order, drawn as they are read: (row number, TRL row)."""
    row = 0
    for step in range(1, steps + 1):
        for p in step_problems(task, config, step):
            yield row, {"prompt": [{"role": "user", "content": p.prompt}] if chat else p.prompt,
                        "reference": p.reference, "prompt_id": p.id}
            row += 1


def _dataset(task: Task, config: TrainConfig, chat: bool, *, finished: bool = False) -> Any:
    """TRL's training dataset: every step's prompts in step order (TRL reads it unshuffled), as a stream.

    A ``datasets.IterableDataset`` that draws step s's prompts when TRL reads them, so building it takes the same
    time and memory for any ``steps`` (a list of every step's prompts took 72 s and 3 GB for 300,000 steps, and
    never ended for 1e14). It is built on ``ExamplesIterable`` rather than ``IterableDataset.from_generator``,
    which hashes its generator and arguments (the task's whole prompt pool). TRL reads an iterable train set with
    ``repeat_iterable_dataset`` in the order its ``RepeatSampler`` gives a map-style one, and accelerate hands each
    process contiguous slices of it, as the sampler does.

    ``finished`` (a run whose checkpoint already holds every step, resumed again) gives an empty stream: the
    Trainer loads the checkpoint and stops at once. A stream has no length, so the Trainer would otherwise
    start the stream over and train one step past the end."""
    from datasets import IterableDataset
    from datasets.iterable_dataset import ExamplesIterable

    steps = 0 if finished else config.steps
    return IterableDataset(ExamplesIterable(lambda: _rows(task, config, chat, steps), {}))


def verifier_reward(verifier_name: str) -> Callable[..., list[float | None]]:
    """TRL's reward function: grpolab's verifier on each completion against the row's reference (None when it
    cannot be scored); a verifier failing on most of a batch stops the run, as in grpolab's engine."""
    verifier = verifiers.get_verifier(verifier_name)

    def correct(completions: list[Any], reference: list[str], **_: Any) -> list[float | None]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = score_batch(verifier, texts, list(reference))
        check_scores(scores, verifier_name=verifier_name, where="a TRL generation batch")
        return [None if np.isnan(r) else float(r) for r in scores.rewards]

    return correct


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete TRL checkpoint of a run (one whose ``trainer_state.json`` was written)."""
    root = Path(run_dir) / "checkpoints"
    found = [(int(m.group(1)), p) for p in (root.iterdir() if root.is_dir() else [])
             if (m := _CHECKPOINT.match(p.name)) and (p / "trainer_state.json").is_file()]
    return max(found)[1] if found else None


def _checkpoint_step(checkpoint: Path | None, config: TrainConfig) -> int:
    if checkpoint is None:
        return 0
    return int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]) // config.num_iterations


def _check_vllm(config: TrainConfig) -> None:
    if not config.use_vllm:
        return
    import torch

    if not torch.cuda.is_available():
        raise UserError("use_vllm needs a CUDA GPU, which this machine lacks (engine trl); drop --use-vllm")
    if importlib.util.find_spec("vllm") is None:
        raise UserError("use_vllm needs the vllm package (engine trl): pip install vllm, or drop --use-vllm")


class TRLRun:
    """One TRL-engine run in ``run_dir`` (see the module docstring)."""

    def __init__(self, config: TrainConfig, run_dir: Path, *, resume: bool, on_step: StepCallback | None,
                 start_eval_cache: Path | None, overwrite: bool = False) -> None:
        from accelerate import PartialState

        check_supported(config)
        _check_vllm(config)
        self.config, self.run_dir, self.on_step = config, Path(run_dir), on_step
        self.start_eval_cache = start_eval_cache
        self.state = PartialState()
        self.main = self.state.is_main_process
        self.lock = DirectoryLock(self.run_dir, "grpolab train --engine trl") if self.main else None
        if self.main:
            _prepare_run_dir(self.run_dir)
            self.lock.acquire()
        try:
            if self.main and (not resume or latest_checkpoint(self.run_dir) is None):
                _check_fresh(self.run_dir, config, overwrite=overwrite, resume=resume)
            self._set_up(resume)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def _set_up(self, resume: bool) -> None:
        config = self.config
        saved = load_saved_config(self.run_dir) if resume else None
        if saved is not None:
            check_resume(self.run_dir, saved, config)
        if config.threads:
            import torch

            torch.set_num_threads(config.threads)
        self.task = load_task_for(config)
        if self.task.train_stream is None and config.prompts_per_step > len(self.task.train):
            raise UserError(f"prompts_per_step {config.prompts_per_step} is more than the {len(self.task.train)} "
                            f"train prompts of task {self.task.name!r}; lower --prompts-per-step")
        self.max_new_tokens = config.max_new_tokens or self.task.max_new_tokens
        self.policy = load_policy(config.model)
        self.checkpoint = latest_checkpoint(self.run_dir) if resume else None
        self.start_step = _checkpoint_step(self.checkpoint, config)
        if self.main:
            self._prepare_logs(resume, saved)

    def _prepare_logs(self, resume: bool, saved: TrainConfig | None) -> None:
        config = self.config
        if resume and self.start_step:  # before training (and before an extension drops summary.json): no gap
            check_logs_reach(self.run_dir, config, self.start_step)
        changes = {} if saved is None else record_resume(self.run_dir, saved, config, self.start_step)
        if "steps" in changes:
            (self.run_dir / "summary.json").unlink(missing_ok=True)
        save_config(config, self.run_dir / "config.yaml")
        write_task_summary(self.task, self.run_dir)
        resume_from = self.start_step + 1 if resume else None
        # report_to's backends get metrics.jsonl's rows, as in the grpolab engine (TRL's report_to is none)
        self.metrics_log = MetricsLog(self.run_dir / "metrics.jsonl", resume_from_step=resume_from,
                                      backends=open_backends(config, self.run_dir, resume=resume))
        self.rollout_log = RolloutLog(self.run_dir / "rollouts", resume_from_step=resume_from)
        prepare_eval_log(self.run_dir / "eval.jsonl", resume_from_step=resume_from if self.start_step else None,
                         extended="steps" in changes)

    def _trainer(self) -> Any:
        from trl import GRPOConfig

        from grpolab.train.trl_engine.recorder import RecordingGRPOTrainer, RunRecorder

        config = self.config
        arguments = grpo_arguments(config, output_dir=str(self.run_dir / "checkpoints"),
                                   num_processes=self.state.num_processes, max_new_tokens=self.max_new_tokens)
        import torch

        device = devices.resolve(config.device)
        if device.type == "cuda" and self.state.num_processes == 1:
            torch.cuda.set_device(device)  # accelerate's device in a single process is the current CUDA device
        args = GRPOConfig(**arguments, use_cpu=device.type == "cpu")
        chat = bool(self.task.use_chat_template and getattr(self.policy.tokenizer, "chat_template", None))
        self.recorder = RunRecorder(iterations=config.num_iterations, steps=config.steps,
                                    metrics_log=self.metrics_log if self.main else None,
                                    rollout_log=self.rollout_log if self.main else None,
                                    evaluate=lambda step: self._evaluate(step, "step"),
                                    eval_every=config.eval_every, on_step=self.on_step)
        self.recorder.written = self.start_step
        trainer = RecordingGRPOTrainer(
            model=self.policy.model, processing_class=self.policy.tokenizer, args=args,
            reward_funcs=verifier_reward(config.verifier or self.task.verifier),
            train_dataset=_dataset(self.task, config, chat, finished=self.start_step >= config.steps),
            peft_config=lora_config(config, self.policy.model),
            callbacks=[self.recorder], advantage=config.advantage, advantage_kwargs=config.advantage_kwargs,
        )
        self.recorder.trainer = trainer
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # grpolab shows its own progress and writes metrics.jsonl
        return trainer

    def _current_policy(self) -> Policy:
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        return Policy(model, self.policy.tokenizer, self.policy.source, self.policy.base)

    def _evaluate(self, step: int, phase: str) -> None:
        """grpolab's evaluation on the main process, on the model's device (its sampling loop runs there); the
        others wait."""
        if self.main:
            cache = self.start_eval_cache if phase == "start" else None
            policy = self._current_policy()
            result = evaluate_policy(policy, self.task, self.config,
                                     max_new_tokens=self.max_new_tokens, cache_dir=cache)
            completions = step * self.config.completions_per_step
            append_evaluation(self.run_dir, {"step": step, "phase": phase, "completions_generated": completions,
                                             **result})
        self.state.wait_for_everyone()

    def run(self) -> RunResult:
        """Evaluate, train with TRL, evaluate, and write ``final/`` and ``summary.json``; release the lock."""
        try:
            self.trainer = self._trainer()
            if self.start_step == 0 and self.config.eval_start:
                self._evaluate(0, "start")
            self.trainer.train(resume_from_checkpoint=str(self.checkpoint) if self.checkpoint else None)
            if self.recorder.diverged is not None:
                self._diverged(*self.recorder.diverged)
            if not self._ended():
                self._evaluate(self.config.steps, "end")
            return self._finish()
        finally:
            if self.main:
                if hasattr(self, "recorder"):
                    self.recorder.drain()
                self.metrics_log.close()
            self.release()

    def _ended(self) -> bool:
        """Whether ``eval.jsonl`` already holds the end evaluation (a finished run resumed again), as the main
        process reads it."""
        from accelerate.utils import broadcast_object_list

        ended = [self.main and any(row.get("phase") == "end" and row.get("step") == self.config.steps
                                   for row in read_metrics(self.run_dir / "eval.jsonl"))]
        return bool(broadcast_object_list(ended)[0]) if self.state.num_processes > 1 else ended[0]

    def _finish(self) -> RunResult:
        metrics = self.recorder.last_metrics or _last_row(self.run_dir)
        if self.main:
            self.recorder.drain()
            result = finish_run(self.run_dir, self._current_policy(), self.config, metrics)
        else:
            result = RunResult(self.run_dir, self.config.steps, metrics, [])
        self.state.wait_for_everyone()
        return result

    def _diverged(self, step: int, reason: str) -> None:
        """End a diverged run as grpolab's engine does (``grpolab.train.divergence``): ``summary.json`` with
        status diverged, the last good checkpoint kept, no ``final/``, one line."""
        error = RunDiverged(f"the run diverged at step {step}: {reason}", step)
        if self.main:
            error = record_divergence(self.run_dir, step, reason, lr=self.config.lr, steps=self.config.steps,
                                      metrics=self.recorder.last_metrics)
        self.state.wait_for_everyone()
        raise error


def _last_row(run_dir: Path) -> dict[str, Any]:
    rows = read_metrics(run_dir / "metrics.jsonl")
    return {k: v for k, v in rows[-1].items() if k != "step"} if rows else {}


def _check_fresh(run_dir: Path, config: TrainConfig, *, overwrite: bool, resume: bool) -> None:
    """A fresh run (or a resume with nothing to resume) refuses what grpolab's engine refuses
    (``grpolab.train.ownership``), and a TRL run's checkpoints too, unless ``overwrite``."""
    checkpoints = run_dir / "checkpoints"
    if not resume and not overwrite and checkpoints.is_dir() and any(checkpoints.glob("checkpoint-*")):
        raise UserError(f"{run_dir} already holds a run; pass --resume to continue it, or choose a new --out "
                        "(or pass --overwrite to replace it)")
    if resume and (run_dir / "config.yaml").exists():
        return  # saved settings and no checkpoint: the run starts again under them (checked in _set_up)
    check_fresh_run_dir(run_dir, overwrite=overwrite, config=config)


def _prepare_run_dir(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UserError(f"cannot write to output directory {run_dir} ({error.strerror}); choose a writable --out") \
            from None


def run_trl(config: TrainConfig, run_dir: str | Path, *, resume: bool = False, on_step: StepCallback | None = None,
            start_eval_cache: Path | None = None, overwrite: bool = False) -> RunResult:
    """Train one run with the TRL engine; what ``grpolab.train.train`` calls for ``engine: trl``."""
    return TRLRun(config, Path(run_dir), resume=resume, on_step=on_step, start_eval_cache=start_eval_cache,
                  overwrite=overwrite).run()
