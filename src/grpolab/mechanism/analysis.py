"""The per-run measurements of ``grpolab mechanism``: one tidy row per (run, part, measure, ...).

Parts: ``format`` (answer-format rates at start and end), ``tokens`` (per-token shifts on the fixed
start-policy completions) and ``passk`` (pass@k before and after, from ``eval.jsonl``). For ``format`` and
``passk`` a row with phase ``change`` (end - start of the same run) sits beside the start and end rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from grpolab import verifiers
from grpolab.errors import UserError
from grpolab.mechanism import shifts
from grpolab.mechanism.runs import ReportedRun, evaluation_rows, reported_runs
from grpolab.models import load_policy
from grpolab.train.run import load_task_for

__all__ = ["COLUMNS", "Options", "measure_runs", "runs_to_analyse"]

COLUMNS = ["run_id", "estimator", "group_size", "seed", "lr", "part", "measure", "token_class", "outcome",
           "phase", "k", "value", "tokens", "completions"]

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """How the fixed completions are drawn.

    Attributes:
        prompts: test prompts (the first ones of the task's test split).
        samples: completions per prompt, drawn from the start policy.
        seed: the sampling seed (the same for the start and for every run's end samples).
        end_samples: also sample from every run's final model, for the end answer-format rates.
        trust_run_code: import a task or verifier that the runs' saved config.yaml names by dotted path.
    """

    prompts: int = 64
    samples: int = 4
    seed: int = 0
    end_samples: bool = True
    trust_run_code: bool = False


def measure_runs(out: Path, options: Options,
                 on_progress: ProgressFn | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """All measurements of the reported runs of the compare output ``out`` -> (per-run table with columns
    ``COLUMNS``, facts about the fixed completions: model, temperature, correct and wrong counts);
    ``on_progress(label)`` is called after the start policy and after each run."""
    on_progress = on_progress or (lambda label: None)
    runs = runs_to_analyse(out, trust_run_code=options.trust_run_code)
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
    start = load_policy(config.model)
    batch = shifts.draw(start.model, start.tokenizer, problems, verifier, **sampling)
    fixed = shifts.fix(batch, start.tokenizer,
                       shifts.completion_logprobs(start.model, batch, temperature=config.temperature))
    start_rates = shifts.format_rates(batch, verifier_name)
    del start
    on_progress("start policy")
    rows: list[dict[str, Any]] = []
    for run in runs:
        final = load_policy(str(run.run_dir))
        end_logprobs = shifts.completion_logprobs(final.model, batch, temperature=config.temperature)
        end_rates = None
        if options.end_samples:
            end_batch = shifts.draw(final.model, final.tokenizer, problems, verifier, **sampling)
            end_rates = shifts.format_rates(end_batch, verifier_name)
        rows += _run_rows(run, fixed, end_logprobs, start_rates, end_rates)
        del final
        on_progress(run.run_id)
    correct = int(fixed.correct.sum())
    facts = {"model": config.model, "temperature": config.temperature, "prompts": len(problems),
             "samples": options.samples, "seed": options.seed, "correct": correct,
             "wrong": len(fixed.correct) - correct, "runs": len(runs)}
    return pd.DataFrame(rows, columns=COLUMNS), facts


def runs_to_analyse(out: Path, *, trust_run_code: bool = False) -> list[ReportedRun]:
    """The reported runs of ``out``; ``UserError`` naming the fix when any has no final model."""
    runs = reported_runs(out, trust_run_code=trust_run_code)
    missing = [run.run_id for run in runs if not (run.run_dir / "final").is_dir()]
    if missing:
        raise UserError(f"{len(missing)} reported run(s) have no final model (final/), e.g. {missing[0]}; "
                        f"finish them with grpolab compare --out {out} (the same settings resume the sweep)")
    return runs


def _run_rows(run: ReportedRun, fixed: shifts.FixedCompletions, end_logprobs: Any,
              start_rates: dict[str, float], end_rates: dict[str, float] | None) -> list[dict[str, Any]]:
    ident = {"run_id": run.run_id, "estimator": run.estimator, "group_size": run.group_size, "seed": run.seed,
             "lr": run.lr}
    rows = [{**ident, "part": "tokens", "measure": measure, "token_class": shift["token_class"],
             "outcome": shift["outcome"], "phase": "", "value": shift[measure], "tokens": shift["tokens"],
             "completions": shift["completions"]}
            for shift in shifts.shift_rows(fixed, end_logprobs)
            for measure in ("dlogp", "dprob", "start_logprob", "end_logprob")]
    evaluations = {row["phase"]: row for row in evaluation_rows(run)}
    for name in ("unscorable", "greedy_unscorable"):
        values = {phase: _number(evaluations.get(phase, {}).get(name)) for phase in ("start", "end")}
        rows += _phase_rows(ident, "format", f"eval_{name}", values)
    for name, start_value in start_rates.items():
        end_value = end_rates.get(name) if end_rates else None
        rows += _phase_rows(ident, "format", f"sampled_{name}", {"start": start_value, "end": _number(end_value)})
    for k in sorted(set().union(*(row["pass_at_k"] for row in evaluations.values())) if evaluations else []):
        values = {phase: evaluations.get(phase, {}).get("pass_at_k", {}).get(k) for phase in ("start", "end")}
        rows += _phase_rows(ident, "passk", f"pass@{k}", {p: _number(v) for p, v in values.items()}, k=k)
    return rows


def _phase_rows(ident: dict[str, Any], part: str, measure: str, values: dict[str, float],
                k: int | None = None) -> list[dict[str, Any]]:
    """Start, end and change (end - start; NaN when either is missing) rows of one measure of one run."""
    values = {**values, "change": values["end"] - values["start"]}
    return [{**ident, "part": part, "measure": measure, "token_class": "", "outcome": "", "phase": phase,
             "k": k, "value": value} for phase, value in values.items()]


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)
