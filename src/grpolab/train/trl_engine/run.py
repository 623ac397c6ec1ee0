"""One run of ``grpolab train --engine trl``: TRL 1.16's ``GRPOTrainer`` trains, grpolab does the rest.

TRL generates, computes the loss and steps the optimiser (on whatever device and processes ``accelerate``
gives it, with vLLM if asked); grpolab loads the model, builds the task's prompts, scores with the task's
verifier as TRL's reward function and makes the advantages with its estimator. The run around TRL's steps is the
run shell grpolab's own engine runs in (``grpolab.train.shell``): the run directory and its lock, the settings, the
step's prompts, the logs, the evaluations at the start and the end, and ``summary.json`` and ``final/``. Under
``accelerate launch`` every process trains; only the main one holds the run directory's lock and writes it.

Devices: ``device`` cpu keeps TRL on the CPU (``use_cpu``); auto or cuda give TRL accelerate's device (with one
process, the GPU ``device`` names; under ``accelerate launch``, each process's own). grpolab's evaluation samples on
the model's device with grpolab's sampler, and every tensor TRL hands to grpolab crosses to the host in
``grpolab.devices.to_host``.

Weights: with LoRA under ``dtype`` bfloat16 on a GPU the base model is loaded in bfloat16, as TRL users load it
(``model_init_kwargs={"dtype": torch.bfloat16}``); peft keeps the adapters in float32 and accelerate's mixed
precision runs the rest. A full fine-tune keeps float32 weights (bfloat16 master weights would lose small
updates), and the CPU keeps float32 (its bfloat16 generate is slower than float32's).

Departures from grpolab's engine:

* The prompts of step s are the ones grpolab's engine draws at step s (same seed, same formula), handed to TRL
  as a dataset in step order that TRL does not shuffle, drawn lazily as TRL reads them; TRL's sampling itself
  is its own (its generator and, with ``use_vllm``, vLLM's), so runs of the two engines differ completion by completion.
* Checkpoints are TRL's (``checkpoints/checkpoint-N``, N optimiser steps, with its optimiser, scheduler and RNG
  state), sealed with checksums (``trl_engine.checkpoints``); ``--resume`` continues from the newest one whose
  checksums verify with ``resume_from_checkpoint``. The resumed run
  is close to, but not bit-identical with, an uninterrupted one.
* A run whose loss or gradient norm turns non-finite stops at that step, saves nothing more, writes
  ``summary.json`` with status ``diverged`` and ends with one line (exit code 2).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from grpolab import devices, verifiers
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.models import Policy, load_policy
from grpolab.rewards import check_scores, score_batch
from grpolab.tasks import Task
from grpolab.train.lifecycle import RunResult
from grpolab.train.runlog import read_metrics
from grpolab.train.settings import check_identity
from grpolab.train.shell import RunShell, step_problems
from grpolab.train.trl_engine.arguments import check_supported, grpo_arguments, lora_config
from grpolab.train.trl_engine.checkpoints import any_checkpoint, latest_checkpoint, saved_success_window

__all__ = ["TRLRun"]

StepCallback = Callable[[int, dict[str, Any]], None]


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
        self.shell = RunShell(config, self.run_dir, command="grpolab train --engine trl", writer=self.main)
        try:  # under the lock: --overwrite deletes no live files
            has_checkpoint = any_checkpoint(self.run_dir)
            self.shell.check_fresh(resume=resume, overwrite=overwrite, has_checkpoint=has_checkpoint)
            self._set_up(resume, has_checkpoint)
        except BaseException:
            self.shell.release()
            raise

    def _set_up(self, resume: bool, has_checkpoint: bool) -> None:
        config = self.config
        saved = self.shell.resume_settings(has_checkpoint=has_checkpoint) if resume else None
        if config.threads:
            import torch

            torch.set_num_threads(config.threads)
        self.task = self.shell.load_task()
        self.max_new_tokens = self.shell.max_new_tokens
        self.policy = load_policy(config.model)
        if loads_bfloat16_weights(config):
            self.policy.model.to(dtype=_bfloat16())
        self.checkpoint = latest_checkpoint(self.run_dir) if resume else None
        if self.checkpoint is not None:  # the data or local model changed since: refused (as grpolab's engine does)
            check_identity(self.checkpoint, config)
        self.start_step = _checkpoint_step(self.checkpoint, config)
        # report_to's backends get metrics.jsonl's rows, as in the grpolab engine (TRL's report_to is none)
        self.shell.open_logs(resume=resume, saved=saved, start_step=self.start_step)

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
        args = GRPOConfig(**arguments)
        chat = bool(self.task.use_chat_template and getattr(self.policy.tokenizer, "chat_template", None))
        self.recorder = RunRecorder(iterations=config.num_iterations, steps=config.steps,
                                    shell=self.shell,
                                    evaluate=lambda step: self._evaluate(step, "step"), on_step=self.on_step)
        self.recorder.written = self.start_step
        trainer = RecordingGRPOTrainer(
            model=self.policy.model, processing_class=self.policy.tokenizer, args=args,
            reward_funcs=verifier_reward(config.verifier or self.task.verifier),
            train_dataset=_dataset(self.task, config, chat, finished=self.start_step >= config.steps),
            peft_config=lora_config(config, self.policy.model),
            callbacks=[self.recorder], advantage=config.advantage, advantage_kwargs=config.advantage_kwargs,
        )
        self.recorder.trainer = trainer
        if self.checkpoint is not None:  # the window of the steps before the checkpoint, as grpolab's engine keeps it
            trainer.load_success_window(saved_success_window(self.checkpoint))
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
            self.shell.evaluate(self._current_policy(), step, phase, cache_dir=self.start_eval_cache,
                                completions_generated=step * self.config.completions_per_step)
        self.state.wait_for_everyone()

    def run(self) -> RunResult:
        """Evaluate, train with TRL, evaluate, and write ``final/`` and ``summary.json``; release the lock."""
        try:
            self.trainer = self._trainer()
            if self.start_step == 0 and self.config.eval_start:
                self._evaluate(0, "start")
            with _without_trls_deprecation_warning():
                self.trainer.train(resume_from_checkpoint=str(self.checkpoint) if self.checkpoint else None)
            if self.recorder.diverged is not None:
                self._diverged(*self.recorder.diverged)
            if not self._ended():
                self._evaluate(self.config.steps, "end")
            return self._finish()
        finally:
            if self.main and hasattr(self, "recorder"):
                self.recorder.drain()
            self.shell.release()

    def _ended(self) -> bool:
        """Whether ``eval.jsonl`` already holds the end evaluation (a finished run resumed again), as the main
        process reads it."""
        from accelerate.utils import broadcast_object_list

        ended = [self.main and any(row.get("phase") == "end" and row.get("step") == self.config.steps
                                   for row in read_metrics(self.run_dir / "eval.jsonl"))]
        return bool(broadcast_object_list(ended)[0]) if self.state.num_processes > 1 else ended[0]

    def _finish(self) -> RunResult:
        from grpolab.train.trl_engine.recorder import compute_summary

        metrics = self.recorder.last_metrics or _last_row(self.run_dir)
        if self.main:
            self.recorder.drain()
            done = self.trainer.state.global_step  # TRL's optimiser steps, restored with its checkpoint
            result = self.shell.finish(self._current_policy(), metrics, compute=compute_summary(
                done, done // self.config.num_iterations * self.config.completions_per_step))
        else:
            result = RunResult(self.run_dir, self.config.steps, metrics, [])
        self.state.wait_for_everyone()
        return result

    def _diverged(self, step: int, reason: str) -> None:
        """End a diverged run as grpolab's engine does (``grpolab.train.divergence``): ``summary.json`` with
        status diverged, the last good checkpoint kept, no ``final/``, one line."""
        error = self.shell.diverged(step, reason, self.recorder.last_metrics)
        self.state.wait_for_everyone()
        raise error


@contextlib.contextmanager
def _without_trls_deprecation_warning() -> Iterator[None]:
    """Silence the one deprecation warning TRL 1.16's own code raises at every generation (its
    ``unwrap_model_for_generation`` reads transformers' ``is_gradient_checkpointing``); grpolab's calls use the new
    names, and every other warning passes."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def _last_row(run_dir: Path) -> dict[str, Any]:
    rows = read_metrics(run_dir / "metrics.jsonl")
    return {k: v for k, v in rows[-1].items() if k != "step"} if rows else {}


def loads_bfloat16_weights(config: Any) -> bool:
    """Whether the TRL engine loads the base model in bfloat16 (see the module docstring): LoRA, ``dtype`` bfloat16
    and a CUDA device."""
    return config.lora and config.dtype == "bfloat16" and devices.resolve(config.device).type == "cuda"


def gpu_footprint(config: Any, policy: Any, task: Any) -> Any:
    """What the peak GPU memory of one of this engine's runs depends on (``grpolab.sweep.sharing.run_footprint``),
    its model set up as ``TRLRun`` sets it up: base weights in bfloat16 where ``loads_bfloat16_weights``, LoRA
    adapters added; TRL samples with that model (no lean copy, its KV cache in the compute dtype) and trains in
    micro-batches of ``arguments.batch_layout``'s size."""
    from grpolab.engine import memory
    from grpolab.sweep.sharing import footprint
    from grpolab.train.lifecycle import wrap_lora
    from grpolab.train.trl_engine.arguments import batch_layout

    if loads_bfloat16_weights(config):
        policy.model.to(dtype=_bfloat16())
    model = wrap_lora(policy.model, config) if config.lora else policy.model
    return footprint(config, model, policy.tokenizer, task, sampler_copy_bytes=0,
                     kv_bytes=memory.compute_bytes(config.dtype), micro_batch=batch_layout(config, 1)[0])


def _bfloat16() -> Any:
    import torch

    return torch.bfloat16
