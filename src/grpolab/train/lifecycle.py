"""The run around the steps: building the task, LoRA wrapping, evaluations during a run, and writing the
final model and ``summary.json`` (whose presence marks a run as complete).

Each function takes what it uses (a policy, a task, a config, a run directory), never the trainer, so this
module sits below ``grpolab.train.trainer`` in the import graph.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpolab import devices
from grpolab.checksums import seal_folder
from grpolab.config import TrainConfig
from grpolab.config.budget import parse_budget
from grpolab.config.fields import names_in_scope
from grpolab.errors import UserError
from grpolab.evaluation import EvalResult, evaluate
from grpolab.io import (
    RESUME,
    atomic_write_text,
    fsync_dir,
    is_write_error,
    naming,
    open_no_follow,
    share_modes,
    write_error,
)
from grpolab.models import Policy
from grpolab.provenance import software
from grpolab.tasks import Task, get_task, with_validation
from grpolab.train.identity import run_identity
from grpolab.train.runlog import (
    evaluation_key,
    missing_steps,
    read_metrics,
    read_summary,
    rewrite_jsonl,
    spans,
    without_successes,
)

__all__ = ["RunResult", "append_evaluation", "budget_record", "check_logs_reach", "evaluate_policy", "finish_run",
           "load_task_for", "prepare_eval_log", "start_evaluation_key", "wrap_lora", "write_task_summary"]


@dataclass
class RunResult:
    """What a finished run leaves behind: its directory, last metrics and evaluations."""

    run_dir: Path
    steps: int
    final_metrics: dict[str, Any] = field(default_factory=dict)
    evaluations: list[dict[str, Any]] = field(default_factory=list)


_TASK_FIELDS = ("use_chat_template", "max_new_tokens")  # Task fields any task's options may override


def load_task_for(config: TrainConfig, *, for_model: bool = True) -> Task:
    """The task of a config; data options are passed only to the tasks that read files. ``for_model``: warn when
    ``config.model`` is an embedded model trained for another task (off where no model runs the task)."""
    options = {k: v for k, v in config.task_options.items() if k not in _TASK_FIELDS}
    overrides = {k: v for k, v in config.task_options.items() if k in _TASK_FIELDS}
    options.update(_data_options(config))
    if config.task in ("gsm8k", "math500"):  # the train/test cut of single-split data follows the run's seed
        options.setdefault("seed", config.seed)
    task = _limited(get_task(config.task, **options), config.task_limit)
    if config.eval_split == "validation":
        task = with_validation(task)
        if not task.validation:
            raise UserError(f"task {config.task!r} has no validation problems; use --eval-split test")
    if config.verifier:
        overrides["verifier"] = config.verifier
    task = dataclasses.replace(task, **overrides)
    if not task.train:
        raise UserError(f"task {config.task!r} has no training problems; check --data / --task-limit")
    if for_model:
        _warn_on_embedded_mismatch(config.model, config.task)
    return task


# Each embedded model was trained for one task; on the other it earns (almost) no reward.
_EMBEDDED_TASKS = {"embedded": "reverse", "embedded-arith": "arith"}


def _warn_on_embedded_mismatch(model: str, task: str) -> None:
    trained_for = _EMBEDDED_TASKS.get(model)
    if trained_for is None or task not in _EMBEDDED_TASKS.values() or task == trained_for:
        return
    better = next(name for name, its_task in _EMBEDDED_TASKS.items() if its_task == task)
    warnings.warn(f"the model {model!r} was trained for the task {trained_for!r}, not {task!r}, and earns almost "
                  f"no reward on it; for {task!r} use --model {better}", UserWarning, stacklevel=2)


def _data_options(config: TrainConfig) -> dict[str, Any]:
    """The task options that come from --data, --task-limit and, for the file task, its columns."""
    columns = {"prompt_column": config.prompt_column, "reference_column": config.reference_column}
    if config.task == "file":
        chosen = {**columns, "path": config.data, "limit": config.task_limit, "verifier": config.verifier}
        return {k: v for k, v in chosen.items() if v is not None}
    if any(v is not None for v in columns.values()):
        raise UserError(f"--prompt-column and --reference-column are for --task file, not {config.task!r}; drop them")
    if config.task in ("gsm8k", "math500"):
        return {k: v for k, v in {"path": config.data, "limit": config.task_limit}.items() if v is not None}
    if config.data is not None:
        raise UserError(f"task {config.task!r} is generated, not read from a file; drop --data")
    return {}


def write_task_summary(task: Task, run_dir: Path, *, identity: dict[str, str] | None = None) -> None:
    """Write ``task.json``: the task's name, verifier, split sizes and data facts (``Task.summary``), and
    ``identity``, that of the data and local model the task was loaded from (``run_identity``), where given."""
    summary = {**task.summary(), **({"identity": identity} if identity is not None else {})}
    atomic_write_text(run_dir / "task.json", json.dumps(summary, indent=1, default=str))


def _limited(task: Task, limit: int | None) -> Task:
    """The first ``limit`` train and test problems of ``task`` (all of them for None)."""
    if limit is None:
        return task
    if task.train_stream is not None:
        raise UserError(f"task {task.name!r} draws fresh train prompts every step, so --task-limit cannot "
                        "apply; drop it (--eval-limit bounds the test prompts)")
    return dataclasses.replace(task, train=task.train[:limit], test=task.test[:limit])


def wrap_lora(model: Any, config: TrainConfig) -> Any:
    """Wrap ``model`` with LoRA adapters on the target modules that exist in it (peft)."""
    from peft import LoraConfig, get_peft_model

    wanted = [name.strip() for name in config.lora_targets.split(",") if name.strip()]
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [name for name in wanted if name in present]
    if not targets:
        raise UserError(
            f"none of the LoRA target modules {wanted} exist in this model; pass --lora-targets with "
            f"names from: {', '.join(sorted(n for n in present if n)[:20])}"
        )
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, target_modules=targets, lora_dropout=0.0)
    return get_peft_model(model, lora)


def prepare_eval_log(path: Path, *, resume_from_step: int | None, extended: bool = False) -> None:
    """Drop evaluations that a resumed run will redo (steps >= resume_from_step), or all of them. A run
    ``extended`` to more steps keeps its old end evaluation as a step evaluation."""
    if not path.exists():
        return
    rows = [row for row in read_metrics(path) if resume_from_step is not None and row["step"] < resume_from_step]
    if extended:
        rows = [{**row, "phase": "step"} if row["phase"] == "end" else row for row in rows]
    rewrite_jsonl(path, rows)


def check_logs_reach(run_dir: Path, config: TrainConfig, step: int) -> None:
    """Before a resume from the checkpoint at ``step`` trains: ``eval.jsonl``, ``metrics.jsonl`` and
    ``rollouts/`` must reach that step, or the resumed run's logs have a gap. Evaluations that an ended run's
    ``summary.json`` holds are written back to ``eval.jsonl`` (re-logged); what cannot be re-logged (metrics and
    rollouts of steps the checkpoint already holds) is named in one warning line per log."""
    import warnings

    eval_path = run_dir / "eval.jsonl"
    rows = read_metrics(eval_path)  # a damaged log: one line naming it, the file untouched
    saved = (read_summary(run_dir) or {}).get("evaluations")
    logged = {evaluation_key(row) for row in rows}
    lost = [row for row in saved if isinstance(row, dict) and isinstance(row.get("step"), int)
            and row["step"] <= step and evaluation_key(row) not in logged] if isinstance(saved, list) else []
    if lost:
        order = {"start": 0, "step": 1, "end": 2}
        rows = sorted(rows + lost, key=lambda row: (row["step"], order.get(row.get("phase"), 1)))
        rewrite_jsonl(eval_path, rows)
        warnings.warn(f"{eval_path} lacked {len(lost)} evaluation(s) up to step {step}; written back from "
                      f"{run_dir / 'summary.json'}{without_successes(lost)}", UserWarning, stacklevel=2)
    expected = {s for s in range(1, step + 1) if config.eval_every and s % config.eval_every == 0
                and s < config.steps} | ({config.steps} if step >= config.steps else set())
    absent = sorted(expected - {row["step"] for row in rows if row.get("phase") in ("step", "end")})
    if absent:
        warnings.warn(f"{eval_path} lacks the evaluation(s) of step(s) {spans(absent)}, which the checkpoint at step "
                      f"{step} already passed; the resumed run does not redo them", UserWarning, stacklevel=2)
    lost_steps = missing_steps([row["step"] for row in read_metrics(run_dir / "metrics.jsonl")], step)
    if lost_steps:
        warnings.warn(f"{run_dir / 'metrics.jsonl'} lacks step(s) {spans(lost_steps)} of the {step} the checkpoint "
                      "holds; they cannot be logged again without training them again, so they stay missing (train "
                      "the run afresh with --overwrite for a complete log)", UserWarning, stacklevel=2)
    rollouts = run_dir / "rollouts"
    lost_steps = missing_steps([s for s in range(1, step + 1) if (rollouts / f"step-{s:06d}.parquet").is_file()], step)
    if lost_steps:
        warnings.warn(f"{rollouts} lacks the completions of step(s) {spans(lost_steps)} of the {step} the checkpoint "
                      "holds; they stay missing (train the run afresh with --overwrite for a complete log)",
                      UserWarning, stacklevel=2)


# The settings a start evaluation depends on are the fields of scope "start" (their metadata): runs that differ
# only in the others (a sweep's estimators, lrs and group sizes at one seed) share one start evaluation. Every
# field is classified (a test checks it), so a new setting never shares by mistake.
_START_FIELDS = names_in_scope(TrainConfig, "start")


def start_evaluation_key(config: TrainConfig) -> str:
    """A digest of what a start evaluation depends on: the fields of scope "start", and the content of the local
    data and model they name (``run_identity``), so that a cached entry never outlives a changed data file."""
    settings = {name: value for name, value in config.to_dict().items() if name in _START_FIELDS}
    settings["identity"] = run_identity(config)
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:20]


def evaluate_policy(policy: Policy, task: Task, config: TrainConfig, *, max_new_tokens: int,
                    cache_dir: Path | None = None) -> dict[str, Any]:
    """The evaluation of ``policy`` on the config's ``eval_split``. A start evaluation is read from (or
    written to) ``cache_dir`` when one is given: LoRA starts as the identity (B = 0), so the step-0 policy
    is the base model whatever the estimator, and runs that share ``start_evaluation_key`` share it."""
    cache = cache_dir / f"{start_evaluation_key(config)}.json" if cache_dir is not None else None
    if cache is not None and cache.is_file():
        cached = _read_cached_evaluation(cache)
        if cached is not None:
            return cached
    result = evaluate(policy, task, n=config.eval_samples, limit=config.eval_limit, seed=config.seed,
                      temperature=config.temperature, max_new_tokens=max_new_tokens,
                      split=config.eval_split).to_dict()
    if cache is not None:  # temp file, fsync, rename, fsync dir: a reader or a power loss never sees half
        cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache, json.dumps(result))
    return result


# the fields every evaluation holds (those added later have defaults, so an older entry still reads)
_EVALUATION_KEYS = frozenset(f.name for f in dataclasses.fields(EvalResult)
                             if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def _read_cached_evaluation(cache: Path) -> dict[str, Any] | None:
    """A start-evaluation cache entry, or None (with a warning naming it) when it is damaged: empty (a power
    loss after an unsynced write), torn, not UTF-8, or not an evaluation's JSON object. It is then taken as
    missing: the start is evaluated again and the entry rewritten."""
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        problem = None if isinstance(data, dict) and _EVALUATION_KEYS <= set(data) else "not an evaluation"
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        problem = "empty" if not cache.stat().st_size else f"not valid JSON: {' '.join(str(error).split())}"
    if problem is None:
        return data
    warnings.warn(f"the cached start evaluation {cache} is damaged ({problem}); evaluating the start again and "
                  "rewriting it", UserWarning, stacklevel=3)
    return None


def append_evaluation(run_dir: Path, row: dict[str, Any]) -> None:
    """Append one evaluation row to the run's ``eval.jsonl``, flushed and fsynced (never through a link planted
    there: ``open_no_follow``)."""
    with naming(run_dir / "eval.jsonl"), open_no_follow(run_dir / "eval.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _save_final_model(run_dir: Path, policy: Policy, lora: bool) -> None:
    """Write ``final/`` whole or not at all: into ``.final.tmp-*``, sealed with ``checksums.json``
    (``grpolab.checksums``), renamed into place; a failed write (disk full) removes the temporary directory and
    raises a one-line ``UserError``."""
    final = run_dir / "final"
    staging: Path | None = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=".final.tmp-", dir=run_dir))
        policy.model.save_pretrained(str(staging), safe_serialization=True)
        policy.tokenizer.save_pretrained(str(staging))
        if lora:
            (staging / "base_model.txt").write_text(policy.source + "\n")
        seal_folder(staging)  # checked whenever final/ is loaded (grpolab.models)
        share_modes(staging)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        fsync_dir(run_dir)
    except Exception as error:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not is_write_error(error):
            raise
        raise write_error(final, error, then=f"{RESUME} (it writes final/ again from the last checkpoint)") from None


def finish_run(run_dir: Path, policy: Policy, config: TrainConfig, metrics: dict[str, Any], *,
               sampler: dict[str, Any] | None = None, ended: dict[str, Any] | None = None,
               compute: dict[str, Any] | None = None) -> RunResult:
    """Save the final model (``policy.model``, LoRA-wrapped or not) and write ``summary.json`` (``"status":
    "finished"``), whose presence marks the run complete; returns the run's result. ``metrics`` is empty when
    a resume had no step left to train: the last logged step's metrics are kept instead. ``sampler``: how the run
    (since its last start) sampled, written as ``"sampler"`` where given; ``ended``: the status fields of a run that
    ended early (``NoSignalWatch.summary_fields``), written over ``"status"``; ``compute``: the run's compute totals
    (``grpolab.train.compute``), written as ``"compute"`` where given, beside ``"budget"`` (``budget_record``)."""
    _save_final_model(run_dir, policy, config.lora)
    evaluations = read_metrics(run_dir / "eval.jsonl")
    earlier = read_summary(run_dir) or {}  # a finished run resumed again: never lose what it already recorded
    if earlier.get("status") == "finished" and earlier.get("steps") == config.steps:
        logged = {evaluation_key(row) for row in evaluations}
        evaluations += [row for row in earlier.get("evaluations") or []
                        if isinstance(row, dict) and evaluation_key(row) not in logged]
        metrics = metrics or earlier.get("final_metrics") or {}
        if sampler is not None and sampler.get("from_step"):  # counted only since a checkpoint of before
            sampler = _with_earlier_sampler(earlier.get("sampler"), sampler)
    metrics = metrics or _last_logged_metrics(run_dir / "metrics.jsonl")
    summary = {"status": "finished", "steps": config.steps,
               "device": devices.describe(devices.model_device(policy.model)), "final_metrics": metrics,
               "evaluations": evaluations}  # per-prompt successes included: a damaged eval.jsonl loses none of them
    summary.update(ended or {})
    if sampler is not None:
        summary["sampler"] = sampler
    if compute is not None:
        summary["compute"] = compute
    summary["budget"] = budget_record(config.budget)
    summary["grpolab"] = software()
    atomic_write_text(run_dir / "summary.json", json.dumps(summary, indent=1))
    return RunResult(run_dir, config.steps, metrics, evaluations)


def budget_record(budget: str | None) -> dict[str, str] | None:
    """summary.json's ``budget``: the ``--budget`` setting and what it held equal (``Budget.holds_equal``); None
    when the run had none (it ran ``--steps`` steps: equal steps, not equal compute)."""
    if budget is None:
        return None
    return {"setting": budget, "holds_equal": parse_budget(budget).holds_equal}


def _with_earlier_sampler(earlier: Any, sampler: dict[str, Any] | None) -> dict[str, Any] | None:
    """A finished run's sampler record (``summary.json``) with what a later start of it, resumed from a checkpoint
    that holds no record, sampled added: the rollouts per path summed, the first fall-back kept."""
    if not isinstance(earlier, dict) or not isinstance(earlier.get("paths"), dict):
        return sampler
    if sampler is None:
        return earlier
    paths = dict(earlier["paths"])
    for path, count in sampler.get("paths", {}).items():
        paths[path] = paths.get(path, 0) + count
    return {"paths": paths, "fallback": earlier.get("fallback") or sampler.get("fallback")}


def _last_logged_metrics(path: Path) -> dict[str, Any]:
    rows = read_metrics(path)
    return {k: v for k, v in rows[-1].items() if k != "step"} if rows else {}
