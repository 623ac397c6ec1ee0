"""The GRPO-family training loop: sample, score, compute advantages, update, log, checkpoint.

grpolab's own engine: how it samples (``engine.collect``), computes advantages and updates (``step``), and how it
checkpoints (``checkpoint``). Everything around the steps (the run directory, its settings, the task and each
step's prompts, the logs, the evaluations, the end of a run) is the run shell both engines share
(``grpolab.train.shell``); ``grpolab.train.engines.train`` picks the engine.

Departures from the papers and from TRL, all deliberate:

* Every step's randomness (prompt choice, sampling) is derived from (seed, step), so a resumed run
  repeats exactly what an uninterrupted one does, and no RNG state needs saving.
* Completions whose advantage is exactly 0 are not forwarded in the update when beta = 0: they add
  exactly nothing to the loss or its gradient (the loss's normaliser still counts them), so the
  result equals computing them; the starved share of compute is saved instead of wasted.
* The remedies for gradient starvation below (dynamic sampling, the curriculum, replay, group masking) are rows of
  ``grpolab.remedies``; each row names its code here (``hook``) and the metric that code logs.
* Dynamic sampling (DAPO, arXiv 2503.14476) samples whole extra batches of P prompts per round and
  keeps the non-degenerate groups until P are kept or the rounds run out; it then trains on fewer
  than P groups rather than padding with degenerate ones. Its true cost is logged as
  ``rollout/completions_generated``.
* What each step spent (optimizer steps, trained sequences and tokens, forwarded and sampled tokens:
  ``grpolab.train.compute``) is logged per step and in total, saved in the checkpoint and written to summary.json.
* A compute budget (``budget``: ``grpolab.config.budget``) ends the run after the step at which it has sampled
  that many completions or tokens, or trained that many tokens, with its end evaluation and checkpoint there;
  ``steps`` stays the bound.
* The difficulty curriculum (``curriculum``: ``grpolab.train.curriculum``) replaces the prompts whose recent
  groups were all wrong or all right before sampling; its per-prompt history is saved in the checkpoint.
* Replay (``replay``: ``grpolab.train.replay``) replaces a step's uniform groups by informative groups of
  earlier steps before the advantages; the step's logs then describe the batch trained. Its buffer is saved
  in the checkpoint.
* Group masking (``mask_degenerate_groups``: SkyRL's zero_variance_filter, prime-rl's filter_zero_advantages)
  computes the advantages on the whole batch, then drops the degenerate groups from what the update trains on
  (out of the loss's numerator and denominator and out of the KL); the step's logs describe the whole batch.
* The reward-variance filter (``variance_filter``: RAGEN-2's SNR-aware filtering) trains only the groups that carry
  the top ``variance_filter_p`` share of the batch's reward variance, left out as group masking leaves them out.
* The run computes on its ``device`` setting (``grpolab.devices``): the model, the sampler, the update and the
  optimiser state live there; the step's batch, the rewards and the logs stay on the host. Checkpoints hold host
  tensors, so a run resumes on any device (the restored weights and moments go to the run's device).
* With ``reward_granularity: token`` the advantages are per token [B, T] (``grpolab.process_rewards``:
  DeepSeekMath's process supervision over verifiable per-character rewards); the logs, the rollout table
  and the starvation metrics then use each completion's token-mean advantage.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpolab import advantages as advantage_registry
from grpolab import capabilities, devices, verifiers
from grpolab.advantages import TokenStatistics
from grpolab.advantages.mix import part_metrics
from grpolab.config import TrainConfig
from grpolab.config.budget import parse_budget
from grpolab.diagnostics import SuccessWindow, starvation_metrics, success_rates
from grpolab.engine.collect import ScoredBatch, collect_batch
from grpolab.engine.fit import check_training_fits
from grpolab.engine.rollout import fixed_weights
from grpolab.engine.sampler_path import SamplerRecord, sampler_metrics
from grpolab.errors import UserError
from grpolab.gradients.geometry import gradient_metrics_for_step
from grpolab.io import RESUME, is_write_error, write_error
from grpolab.models import Policy, load_policy
from grpolab.rewards import check_scores
from grpolab.tasks import Problem, Task
from grpolab.train.batch import StepBatch, mask_degenerate, variance_filter
from grpolab.train.checkpoint import load_latest, optimizer_tensors, restore_optimizer, save_checkpoint
from grpolab.train.compute import ComputeSpent, update_spent
from grpolab.train.curriculum import DifficultyCurriculum, check_curriculum
from grpolab.train.divergence import divergence_reason
from grpolab.train.lifecycle import RunResult, wrap_lora
from grpolab.train.replay import ReplayBuffer
from grpolab.train.shell import RunShell, rollout_figures, rollout_table, step_problems, step_seed
from grpolab.train.step_advantages import completion_view, estimator_statistics, step_advantages
from grpolab.train.update import build_optimizer, trained_rows, update_policy
from grpolab.verifiers.process import get_process_verifier

__all__ = ["RunResult", "Trainer"]

StepCallback = Callable[[int, dict[str, Any]], None]


class Trainer:
    """One training run in ``run_dir`` (created; resumed from its newest checkpoint if ``resume``, under the
    run's saved settings, checked against its newest checkpoint's). The run directory's lock is held from
    construction to the end of ``run``. A fresh run refuses a directory holding another run, its logs or files
    grpolab did not write unless ``overwrite`` (``grpolab.train.ownership``); a step whose loss, gradient or
    parameters are not finite ends the run (``grpolab.train.divergence``)."""

    def __init__(self, config: TrainConfig, run_dir: str | Path, *, resume: bool = False,
                 on_step: StepCallback | None = None, policy: Policy | None = None, task: Task | None = None,
                 start_eval_cache: Path | None = None, overwrite: bool = False):
        self.config = config
        self.run_dir = Path(run_dir)
        self.on_step = on_step
        self.start_eval_cache = start_eval_cache  # shared start evaluations (a sweep's runs at one seed)
        check_estimator(config)  # before the run directory exists: a refused estimator leaves nothing behind
        self.shell = RunShell(config, self.run_dir, command="grpolab train")  # locked until run() ends
        try:  # under the lock: --overwrite deletes no live files
            self.shell.check_fresh(resume=resume, overwrite=overwrite, has_checkpoint=_has_checkpoint(self.run_dir))
            self._set_up(resume, policy, task)
        except BaseException:
            self.shell.release()
            raise

    def _set_up(self, resume: bool, policy: Policy | None, task: Task | None) -> None:
        config = self.config
        # before anything loads: the run directory's settings (config.yaml, checked against the checkpoint's)
        saved = self.shell.resume_settings(has_checkpoint=_has_checkpoint(self.run_dir)) if resume else None
        if config.threads:
            torch.set_num_threads(config.threads)
        self.task = self.shell.load_task(task)
        check_curriculum(config, self.task)
        self.verifier = verifiers.get_verifier(config.verifier or self.task.verifier)
        self.process_verifier = (get_process_verifier(config.verifier or self.task.verifier)
                                 if config.reward_granularity == "token" else None)
        torch.manual_seed(config.seed)
        self.device = devices.bind(config.device)  # the current CUDA device: graphs and streams land on it
        self.policy = policy or load_policy(config.model)
        self.model = wrap_lora(self.policy.model, config) if config.lora else self.policy.model
        self.model.to(self.device)
        self.max_new_tokens = self.shell.max_new_tokens = check_training_fits(
            self.model, self.policy.tokenizer, self.task, config, self.shell.max_new_tokens)
        self.reference = _reference_model(self.model, config)
        self.params = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = build_optimizer(self.params, config)
        self.sampler = SamplerRecord()  # how the run sampled, for summary.json
        self.completions_generated = 0  # restored from the checkpoint on resume
        self.spent = ComputeSpent()  # the run's compute totals (grpolab.train.compute); restored on resume
        self.spent_from_step = 0  # the step the totals count from: 0, or an older checkpoint's step (no totals)
        self.sampled_this_step = 0  # completion tokens the current step has sampled so far
        self.budget = parse_budget(config.budget) if config.budget else None
        self.success_window = SuccessWindow()  # pbar of starvation/d_iid; restored from the checkpoint
        self.curriculum = DifficultyCurriculum(config.curriculum_window) if config.curriculum else None
        self.curriculum_replaced = 0  # settled prompts the curriculum replaced in the current step
        self.replay = ReplayBuffer(config.replay_max_age) if config.replay else None
        self.start_step = self._restore() if resume else 0
        self.shell.open_logs(resume=resume, saved=saved, start_step=self.start_step)

    # ------------------------------------------------------------------ checkpoints

    def _restore(self) -> int:
        checkpoint = load_latest(self.run_dir)
        if checkpoint is None:
            return 0
        missing = set(self.params) - set(checkpoint.weights)
        if missing:
            raise UserError(f"checkpoint {checkpoint.path} does not match this model (missing {sorted(missing)[:3]}); "
                            "resume with the same --model and LoRA settings, or use a new --out")
        with torch.no_grad():
            for name, param in self.params.items():
                param.copy_(checkpoint.weights[name])
        names = {id(p): n for n, p in self.params.items()}
        restore_optimizer(self.optimizer, names, checkpoint.optimizer, checkpoint.state.get("optimizer", {}))
        self.completions_generated = int(checkpoint.state.get("completions_generated", 0))
        self._restore_spent(checkpoint.state, checkpoint.step)
        self.success_window.load_state(checkpoint.state.get("success_window", []))
        self.sampler.load_state(checkpoint.state.get("sampler"), checkpoint.step)
        if self.curriculum is not None:
            self.curriculum.load_state(checkpoint.state.get("curriculum", {}))
        if self.replay is not None:
            self.replay.load_state(checkpoint.state.get("replay", []))
        return checkpoint.step

    def _restore_spent(self, state: dict[str, Any], step: int) -> None:
        """The compute totals a checkpoint saved; one written before the counters holds only the tokens sampled,
        so the other totals count from its step (``spent_from_step``, stated in summary.json)."""
        if "compute" in state:
            self.spent = ComputeSpent.from_state(state["compute"])
            self.spent_from_step = int(state.get("compute_from_step", 0))
        else:
            self.spent = ComputeSpent(sampled_tokens=int(state.get("tokens_generated", 0)))
            self.spent_from_step = step

    def _save(self, step: int) -> None:
        names = {id(p): n for n, p in self.params.items()}
        tensors, extras = optimizer_tensors(self.optimizer, names)
        state = {"optimizer": extras, "completions_generated": self.completions_generated,
                 "compute": self.spent.state(), "compute_from_step": self.spent_from_step,
                 "success_window": self.success_window.state(), "sampler": self.sampler.state(),
                 "settings": self.config.to_dict()}
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state()
        if self.replay is not None:
            state["replay"] = self.replay.state()
        save_checkpoint(self.run_dir, step, dict(self.params), tensors, state, keep=self.config.keep_checkpoints)

    # ------------------------------------------------------------------ one step

    def _sample_round(self, step: int, round_: int) -> ScoredBatch:
        problems = self._problems(step, round_)
        generator = torch.Generator().manual_seed(step_seed(self.config.seed, step, round_))
        scored = collect_batch(self.model, self.policy.tokenizer, problems, self.verifier,
                               num_samples=self.config.group_size, max_new_tokens=self.max_new_tokens,
                               use_chat_template=self.task.use_chat_template, temperature=self.config.temperature,
                               top_p=self.config.top_p, generator=generator, dtype=self.config.sampler_dtype,
                               process_verifier=self.process_verifier)
        if not self.model.training:  # sampling keeps the mode; only a model handed over in eval mode switches
            self.model.train()
        self.sampler.note(scored.rollout)
        self.completions_generated += len(scored.rollout.texts)
        self.sampled_this_step += int(scored.rollout.completion_mask.sum())
        if self.curriculum is not None:
            self.curriculum.record(step, scored.problems, scored.rewards)
        check_scores(scored.scores, verifier_name=self.config.verifier or self.task.verifier, where=f"step {step}")
        return scored

    def _problems(self, step: int, round_: int) -> list[Problem]:
        """The prompts of ``step`` / ``round_``: the run's draw, less the curriculum's settled prompts."""
        if self.curriculum is None:
            return step_problems(self.task, self.config, step, round_)
        problems, replaced = self.curriculum.problems(self.task, self.config, step, round_)
        self.curriculum_replaced += replaced
        return problems

    def _collect(self, step: int) -> tuple[StepBatch, dict[str, float]]:
        """Sample (with dynamic sampling: several rounds) and return the batch to train on."""
        self.curriculum_replaced = 0
        self.sampled_this_step = 0
        scored = self._sample_round(step, 0)
        scores = scored.scores
        extra: dict[str, float] = {"rollout/verifier_errors": scores.errors,
                                   "rollout/verifier_timeouts": scores.timeouts,
                                   "rollout/prompts_truncated": scored.rollout.prompts_truncated,
                                   **sampler_metrics(scored.rollout)}
        batch, seen = StepBatch.from_scored(scored), scored.rewards
        if self.config.dynamic_sampling:
            batch, seen, rounds = self._dynamic_fill(step, batch)
            extra["rollout/dynamic_rounds"] = rounds
        if self.curriculum is not None:
            extra["rollout/curriculum_replaced"] = self.curriculum_replaced
        if self.replay is not None:  # the success window below reads ``seen``: what was sampled, not replayed
            batch, replayed = self.replay.refill(step, batch)
            extra.update(replayed)
        self.success_window.add(success_rates(seen))  # everything sampled, before any filter
        if self.config.dynamic_sampling:
            # the starvation of everything sampled, before the filter removed the degenerate groups
            extra.update({f"sampled/{k}": v for k, v in starvation_metrics(seen, window=self.success_window).items()})
        return batch, extra

    def _dynamic_fill(self, step: int, batch: StepBatch) -> tuple[StepBatch, np.ndarray, int]:
        """DAPO's dynamic sampling: more rounds until ``prompts_per_step`` non-degenerate groups are kept (or
        ``dynamic_max_rounds`` ran out); returns the kept batch, the rewards [P_seen, G] of every group
        sampled, and the number of extra rounds."""
        kept = batch.non_degenerate()
        seen = [batch.rewards]
        rounds = 0
        while kept.num_groups < self.config.prompts_per_step and rounds < self.config.dynamic_max_rounds:
            rounds += 1
            more = StepBatch.from_scored(self._sample_round(step, rounds))
            seen.append(more.rewards)
            kept = kept.concat(more.non_degenerate())
        return kept.first(self.config.prompts_per_step), np.concatenate(seen), rounds

    def step(self, step: int) -> dict[str, Any]:
        """Run training step ``step`` (1-based) and return its metrics."""
        started = time.perf_counter()
        with fixed_weights(self.model):  # the sampler copies the weights of the last update once, not per round
            batch, extra = self._collect(step)
        rollout_time = time.perf_counter() - started
        advantages = self._advantages(batch, step)  # [P, G], or [B, T] with per-token rewards
        per_completion = completion_view(batch, advantages)  # [P, G]
        grad_metrics: dict[str, float] = {}
        if self.config.grad_analysis_every and step % self.config.grad_analysis_every == 0 and batch.num_groups:
            # at the policy that sampled the batch, before the update
            grad_metrics = gradient_metrics_for_step(self.model, batch, advantages, self.config)
        lr = _learning_rate(self.config, step)
        update_started = time.perf_counter()
        trained, trained_advantages, masked = self._trained(batch, advantages)
        update = update_policy(self.model, self.optimizer, trained, trained_advantages, self.config,
                               lr=lr, max_length=self.max_new_tokens, reference=self.reference)
        update_time = time.perf_counter() - update_started
        spent = self._count_spent(trained, trained_advantages)
        self._log_rollouts(step, batch, per_completion)
        figures = rollout_figures(batch.rewards, batch.lengths, batch.truncated.tolist(), self.completions_generated,
                                  self.spent.sampled_tokens)
        starvation = starvation_metrics(batch.rewards, per_completion, lengths=batch.lengths,
                                        window=self.success_window) if batch.num_groups else {}
        entropy = {"rollout/entropy": batch.sampling_entropy()} if batch.num_groups else {}
        parts = part_metrics(self.config.advantage, batch.rewards, batch.lengths)
        metrics = {**figures, **entropy, **extra, **starvation, **update, **masked, **parts, **grad_metrics, **spent}
        metrics.update(_perf_metrics(batch, started, rollout_time, update_time, update.get("loss/train_tokens", 0)))
        return metrics

    def _count_spent(self, trained: StepBatch, advantages: torch.Tensor) -> dict[str, float]:
        """Add the step's compute (``grpolab.train.compute``) to the run's totals; returns both as metrics."""
        rows = trained_rows(trained, advantages, self.config)  # the rows the update forwarded
        step = update_spent(trained, rows, self.config.num_iterations) + ComputeSpent(
            sampled_tokens=self.sampled_this_step)
        self.spent = self.spent + step
        return {**step.step_metrics(), **self.spent.total_metrics()}

    def _trained(self, batch: StepBatch, advantages: torch.Tensor) -> tuple[StepBatch, torch.Tensor, dict[str, float]]:
        """The batch and advantages the update trains on: all of them, under ``mask_degenerate_groups`` those of
        the non-degenerate groups (``batch.mask_degenerate``), under ``variance_filter`` those carrying the top
        share of the reward variance (``batch.variance_filter``); the step's logs keep the whole batch."""
        trained, kept, logged = batch, advantages, {}
        if self.config.mask_degenerate_groups:
            trained, kept = mask_degenerate(batch, advantages)
            logged["loss/masked_groups"] = float(batch.num_groups - trained.num_groups)
        if self.config.variance_filter:
            filtered, kept = variance_filter(trained, kept, self.config.variance_filter_p)
            dropped = trained.num_groups - filtered.num_groups
            logged["loss/variance_filtered_share"] = dropped / batch.num_groups if batch.num_groups else 0.0
            trained = filtered
        return trained, kept, logged

    def _advantages(self, batch: StepBatch, step: int) -> torch.Tensor:
        """Advantages [P, G] of the outcome rewards, or [B, T] of the per-token rewards."""
        try:
            return step_advantages(batch, self.config, max_length=self.max_new_tokens,
                                   statistics=estimator_statistics(self.model, batch, self.config))
        except UserError as error:  # e.g. a user verifier's non-binary rewards under a binary-only estimator
            raise UserError(f"step {step}: {error}; pick a matching --verifier / --advantage") from None

    def _log_rollouts(self, step: int, batch: StepBatch, advantages: torch.Tensor) -> None:
        g = batch.group_size
        self.shell.write_rollouts(step, rollout_table(
            step, [p.id for p in batch.problems for _ in range(g)], batch.texts, batch.rewards.reshape(-1).tolist(),
            advantages.reshape(-1).tolist(), batch.lengths.reshape(-1).tolist(), batch.truncated.tolist(),
            group_size=g))

    # ------------------------------------------------------------------ the run

    def run(self) -> RunResult:
        """Train from ``start_step`` to ``config.steps`` with evaluations and checkpoints; then give up the
        run directory's lock."""
        try:
            result = self._run()
            self.shell.release()  # closing the metrics log flushes it: a full disk there is a write error too
            return result
        except BaseException as error:
            with contextlib.suppress(Exception):  # the first failure is the one to report; the lock goes all the same
                self.shell.release()
            if isinstance(error, Exception) and is_write_error(error):  # a full disk while logging: one line
                raise write_error(getattr(error, "filename", None) or self.run_dir, error, then=RESUME) from None
            raise

    def _run(self) -> RunResult:
        config = self.config
        if self.start_step == 0 and config.eval_start:
            self._evaluate(0, "start")
        metrics: dict[str, Any] = {}
        for step in range(self.start_step + 1, config.steps + 1):
            if self._budget_spent():  # a run resumed after its budget ran out
                break
            metrics = self.step(step)
            self.shell.record_step(step, metrics)
            self._stop_if_diverged(step, metrics)
            last = step == config.steps or self._budget_spent() or self.shell.stopping
            if self.shell.evaluation_due(step) and not last:
                self._evaluate(step, "step")
            if last:
                self._evaluate(step, "end")
            if last or (config.checkpoint_every and step % config.checkpoint_every == 0):
                self._save(step)
            if self.on_step is not None:
                self.on_step(step, metrics)
            if last:
                break
        return self.shell.finish(self._current_policy(), metrics, sampler=self.sampler.summary(),
                                 compute=self._compute_summary())

    def _compute_summary(self) -> dict[str, Any]:
        """summary.json's ``compute``: the run's totals, the completions sampled and the step they count from."""
        return {**self.spent.state(), "sampled_completions": self.completions_generated,
                "counted_from_step": self.spent_from_step}

    def _budget_spent(self) -> bool:
        """Whether the run has spent its ``budget`` (``grpolab.config.budget``); False without one."""
        return self.budget is not None and self.budget.spent(
            {"completions": self.completions_generated, "tokens": self.spent.sampled_tokens,
             "trained_tokens": self.spent.trained_tokens})

    def _stop_if_diverged(self, step: int, metrics: dict[str, Any]) -> None:
        reason = divergence_reason(metrics, self.params.values())
        if reason is not None:
            raise self.shell.diverged(step, reason, metrics)

    def _current_policy(self) -> Policy:
        """The policy being trained: the (LoRA-wrapped) model with the loaded policy's tokenizer."""
        return Policy(self.model, self.policy.tokenizer, self.policy.source, self.policy.base)

    def _evaluate(self, step: int, phase: str) -> dict[str, Any]:
        """Evaluate the current policy on the config's ``eval_split`` and append the row to ``eval.jsonl``."""
        return self.shell.evaluate(self._current_policy(), step, phase, cache_dir=self.start_eval_cache,
                                   completions_generated=self.completions_generated)


def _has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a checkpoint of this engine (its layout: ``checkpoints/step-N``)."""
    return capabilities.engine("grpolab").has_checkpoint(run_dir)


def check_estimator(config: TrainConfig) -> None:
    """Fail before loading anything on an unknown estimator, a group size it cannot use or ``--advantage-kwargs`` it
    does not take (both engines: ``trl_engine.arguments.check_supported`` calls it too)."""
    try:
        entry = advantage_registry.info(config.advantage)
    except ValueError as error:
        raise UserError(str(error)) from None
    if entry.needs_group and config.group_size < 2:
        raise UserError(f"advantage estimator {config.advantage!r} needs groups of G >= 2 completions, got "
                        f"--group-size {config.group_size}; raise it or use a fixed-reference estimator such as sign")
    try:  # bad --advantage-kwargs fail here, not after the model has loaded
        advantage_registry.compute_advantages(config.advantage, np.zeros((1, config.group_size)),
                                              lengths=np.ones((1, config.group_size)),
                                              token_statistics=TokenStatistics.uniform(config.group_size),
                                              **config.advantage_kwargs)
    except ValueError as error:
        raise UserError(f"{error}; fix --advantage-kwargs") from None


def _reference_model(model: torch.nn.Module, config: TrainConfig) -> torch.nn.Module | None:
    if config.beta <= 0:
        return None
    import copy

    reference = copy.deepcopy(model).eval()
    for param in reference.parameters():
        param.requires_grad_(False)
    return reference


def _learning_rate(config: TrainConfig, step: int) -> float:
    """Warm-up, then constant, linear or cosine decay to 0 at the last step (step is 1-based)."""
    if config.warmup_steps and step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if config.lr_schedule == "constant":
        return config.lr
    span = max(config.steps - config.warmup_steps, 1)
    progress = min(max(step - config.warmup_steps - 1, 0) / span, 1.0)
    if config.lr_schedule == "linear":
        return config.lr * (1.0 - progress)
    return config.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def _perf_metrics(batch: StepBatch, started: float, rollout_time: float, update_time: float,
                  train_tokens: float) -> dict[str, float]:
    tokens = float(batch.lengths.sum())
    return {
        "perf/step_time": time.perf_counter() - started,
        "perf/rollout_time": rollout_time,
        "perf/update_time": update_time,
        "perf/rollout_tokens_per_s": tokens / rollout_time if rollout_time > 0 else 0.0,
        "perf/train_tokens_per_s": train_tokens / update_time if update_time > 0 else 0.0,
    }

