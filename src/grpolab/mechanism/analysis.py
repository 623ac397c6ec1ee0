"""The per-run measurements of ``grpolab mechanism``: one tidy row per (run, part, measure, ...).

Parts: ``format`` (answer-format rates at start and end), ``tokens`` (per-token shifts on the fixed
start-policy completions), ``passk`` (pass@k before and after, from ``eval.jsonl``) and ``updates`` (the
update's geometry from the runs' checkpoints, ``grpolab.mechanism.updates``). For ``format`` and ``passk`` a
row with phase ``change`` (end - start of the same run) sits beside the start and end rows. ``format`` and
``tokens`` load and sample models (the costly parts); ``passk`` and ``updates`` read files only (``updates``
loads the base model's weights for a full fine-tune's start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from grpolab import devices, verifiers
from grpolab.errors import UserError
from grpolab.mechanism import shifts, updates
from grpolab.mechanism.runs import ReportedRun, evaluation_rows, reported_runs
from grpolab.models import load_policy
from grpolab.train.lifecycle import load_task_for

__all__ = ["COLUMNS", "PARTS", "Options", "measure_runs", "parse_parts", "runs_to_analyse"]

COLUMNS = ["run_id", "estimator", "group_size", "seed", "lr", "part", "measure", "token_class", "outcome",
           "phase", "k", "value", "tokens", "completions"]

PARTS = ("format", "tokens", "passk", "updates")
_SAMPLED = ("format", "tokens")  # the parts that load and sample the start and final models

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """How the fixed completions are drawn.

    Attributes:
        prompts: test prompts (the first ones of the task's test split).
        samples: completions per prompt, drawn from the start policy.
        seed: the sampling seed (the same for the start and for every run's end samples).
        end_samples: also sample from every run's final model, for the end answer-format rates.
        parts: the parts to measure (``PARTS``).
        trust_run_code: import a task or verifier that the runs' saved config.yaml names by dotted path.
        variant: the variant to analyse, of a comparison with ``--vary`` axes (None: it has one).
        device: where the models sample and score (``grpolab.devices``: auto, cpu, cuda, cuda:N).
    """

    prompts: int = 64
    samples: int = 4
    seed: int = 0
    end_samples: bool = True
    parts: tuple[str, ...] = PARTS
    trust_run_code: bool = False
    variant: str | None = None
    device: str = "auto"

    @property
    def sampled(self) -> bool:
        """Whether any chosen part needs the start and final models."""
        return any(part in self.parts for part in _SAMPLED)


def measure_runs(out: Path, options: Options,
                 on_progress: ProgressFn | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The chosen parts' measurements of the reported runs of the compare output ``out`` -> (per-run table
    with columns ``COLUMNS``, facts: the fixed completions' model, temperature, correct and wrong counts when
    sampled, and ``update_notes``, what the ``updates`` part could not measure); ``on_progress(label)`` is
    called after the start policy and after each run."""
    on_progress = on_progress or (lambda label: None)
    runs = runs_to_analyse(out, need_final=options.sampled, trust_run_code=options.trust_run_code,
                           variant=options.variant)
    config = runs[0].config
    facts: dict[str, Any] = {"model": config.model, "temperature": config.temperature, "prompts": 0,
                             "samples": options.samples, "seed": options.seed, "correct": 0, "wrong": 0,
                             "runs": len(runs), "parts": list(options.parts), "update_notes": []}
    rows: list[dict[str, Any]] = []
    if options.sampled:
        sampled_rows, sampled_facts = _sampled_rows(runs, options, on_progress)
        rows += sampled_rows
        facts.update(sampled_facts)
    if "passk" in options.parts:
        rows += [row for run in runs for row in _passk_rows(run)]
    if "updates" in options.parts:
        update_rows, facts["update_notes"] = updates.update_rows(runs, _start_weights(config))
        rows += update_rows
        on_progress("updates")
    return pd.DataFrame(rows, columns=COLUMNS), facts


def _sampled_rows(runs: list[ReportedRun], options: Options,
                  on_progress: ProgressFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``format`` and ``tokens`` rows: completions drawn from the start policy, scored by each run's final
    model, and (end_samples) drawn again from each final model."""
    config = runs[0].config.replace(eval_split="test")
    task = load_task_for(config)
    verifier_name = config.verifier or task.verifier
    verifier = verifiers.get_verifier(verifier_name)
    problems = list(task.test[: options.prompts])
    if not problems:
        raise UserError(f"task {config.task!r} has no test prompts to draw completions for")
    sampling = {"samples": options.samples, "seed": options.seed, "temperature": config.temperature,
                "max_new_tokens": config.max_new_tokens or task.max_new_tokens,
                "use_chat_template": task.use_chat_template}
    device = devices.bind(options.device)
    start = load_policy(config.model)
    start.model.to(device)
    batch = shifts.draw(start.model, start.tokenizer, problems, verifier, **sampling)
    fixed = shifts.fix(batch, start.tokenizer,
                       shifts.completion_logprobs(start.model, batch, temperature=config.temperature))
    start_rates = shifts.format_rates(batch, verifier_name)
    del start
    on_progress("start policy")
    rows: list[dict[str, Any]] = []
    for run in runs:
        final = load_policy(str(run.run_dir))
        final.model.to(device)
        end_logprobs = shifts.completion_logprobs(final.model, batch, temperature=config.temperature)
        end_rates = None
        if options.end_samples:
            end_batch = shifts.draw(final.model, final.tokenizer, problems, verifier, **sampling)
            end_rates = shifts.format_rates(end_batch, verifier_name)
        if "tokens" in options.parts:
            rows += _token_rows(run, fixed, end_logprobs)
        if "format" in options.parts:
            rows += _format_rows(run, start_rates, end_rates)
        del final
        on_progress(run.run_id)
    correct = int(fixed.correct.sum())
    return rows, {"prompts": len(problems), "correct": correct, "wrong": len(fixed.correct) - correct}


def _start_weights(config: Any) -> dict[str, torch.Tensor] | None:
    """The trainable tensors at step 0 of a full fine-tune (the base model, as the trainer loads it), or None
    under LoRA (whose weight-space update starts at zero)."""
    if config.lora:
        return None
    policy = load_policy(config.model)
    return {name: param.detach() for name, param in policy.model.named_parameters()}


def parse_parts(text: str) -> tuple[str, ...]:
    """``--parts`` -> the chosen parts in ``PARTS`` order; ``UserError`` naming an unknown or missing part."""
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in PARTS]
    if unknown or not chosen:
        raise UserError(f"--parts takes a comma-separated subset of {', '.join(PARTS)}, got {text!r}")
    return tuple(part for part in PARTS if part in chosen)


def runs_to_analyse(out: Path, need_final: bool = True, *, trust_run_code: bool = False,
                    variant: str | None = None) -> list[ReportedRun]:
    """The reported runs of ``out`` (of ``variant``); ``UserError`` naming the fix when ``need_final`` and any
    has no final model."""
    runs = reported_runs(out, trust_run_code=trust_run_code, variant=variant)
    missing = [] if not need_final else [run.run_id for run in runs if not (run.run_dir / "final").is_dir()]
    if missing:
        raise UserError(f"{len(missing)} reported run(s) have no final model (final/), e.g. {missing[0]}; "
                        f"finish them with grpolab compare --out {out} (the same settings resume the sweep)")
    return runs


def _ident(run: ReportedRun) -> dict[str, Any]:
    return {"run_id": run.run_id, "estimator": run.estimator, "group_size": run.group_size, "seed": run.seed,
            "lr": run.lr}


def _token_rows(run: ReportedRun, fixed: shifts.FixedCompletions, end_logprobs: Any) -> list[dict[str, Any]]:
    return [{**_ident(run), "part": "tokens", "measure": measure, "token_class": shift["token_class"],
             "outcome": shift["outcome"], "phase": "", "value": shift[measure], "tokens": shift["tokens"],
             "completions": shift["completions"]}
            for shift in shifts.shift_rows(fixed, end_logprobs)
            for measure in ("dlogp", "dprob", "start_logprob", "end_logprob")]


def _format_rows(run: ReportedRun, start_rates: dict[str, float],
                 end_rates: dict[str, float] | None) -> list[dict[str, Any]]:
    ident = _ident(run)
    evaluations = {row["phase"]: row for row in evaluation_rows(run)}
    rows = []
    for name in ("unscorable", "greedy_unscorable"):
        values = {phase: _number(evaluations.get(phase, {}).get(name)) for phase in ("start", "end")}
        rows += _phase_rows(ident, "format", f"eval_{name}", values)
    for name, start_value in start_rates.items():
        end_value = end_rates.get(name) if end_rates else None
        rows += _phase_rows(ident, "format", f"sampled_{name}", {"start": start_value, "end": _number(end_value)})
    return rows


def _passk_rows(run: ReportedRun) -> list[dict[str, Any]]:
    evaluations = {row["phase"]: row for row in evaluation_rows(run)}
    rows = []
    for k in sorted(set().union(*(row["pass_at_k"] for row in evaluations.values())) if evaluations else []):
        values = {phase: evaluations.get(phase, {}).get("pass_at_k", {}).get(k) for phase in ("start", "end")}
        rows += _phase_rows(_ident(run), "passk", f"pass@{k}", {p: _number(v) for p, v in values.items()}, k=k)
    return rows


def _phase_rows(ident: dict[str, Any], part: str, measure: str, values: dict[str, float],
                k: int | None = None) -> list[dict[str, Any]]:
    """Start, end and change (end - start; NaN when either is missing) rows of one measure of one run."""
    values = {**values, "change": values["end"] - values["start"]}
    return [{**ident, "part": part, "measure": measure, "token_class": "", "outcome": "", "phase": phase,
             "k": k, "value": value} for phase, value in values.items()]


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)
