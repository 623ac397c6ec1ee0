"""``preflight(config, out_dir)``: sample n completions for each train prompt, predict the starvation of the pool
(``grpolab.preflight.predict``) and write the counts, the band and control data folders, the summary and the page.
The library call behind ``grpolab preflight``; the command only parses and prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.preflight import outputs, predict
from grpolab.preflight.result import PreflightResult
from grpolab.tasks import Problem, Task

__all__ = ["PreflightResult", "analyse", "preflight"]


def analyse(successes: Any, n: int, *, band: tuple[float, float] | None = None,
            model: str = "", task: str = "", problem_ids: list[str] | None = None) -> PreflightResult:
    """The predictions of counts successes [P] of n samples each, without sampling anything."""
    counts = np.asarray(successes, dtype=int)
    table = predict.group_table(counts, n)
    group_size = predict.recommend_group_size(table)
    chosen = band if band is not None else predict.band_for(group_size)
    mask = predict.in_band(counts, n, chosen)
    band_degenerate = float(predict.group_table(counts[mask], n, (group_size,))["degenerate"].iloc[0])
    return PreflightResult(model, task, n, list(problem_ids or [str(i) for i in range(counts.size)]), counts, table,
                           float(counts.mean() / n), predict.mean_p_variance(counts, n), group_size, chosen,
                           int(mask.sum()), band_degenerate)


def _sample(config: TrainConfig, task: Task, problems: list[Problem],
            on_chunk: Callable[[int], None] | None) -> np.ndarray:
    from grpolab import devices
    from grpolab.evaluation import sample_successes
    from grpolab.models import load_policy

    device = devices.bind(config.device)
    policy = load_policy(config.model)
    policy.model.to(device)
    return sample_successes(policy, task, problems, n=config.eval_samples, seed=config.seed,
                            temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                            on_chunk=on_chunk)


def preflight(config: TrainConfig, out_dir: str | Path, *, band: tuple[float, float] | None = None,
              on_start: Callable[[int], None] | None = None,
              on_chunk: Callable[[int], None] | None = None) -> PreflightResult:
    """Sample ``config.eval_samples`` completions for each of the first ``config.eval_limit`` train prompts of
    ``config``'s task with ``config``'s model, predict, and write ``out_dir`` (``outputs``, ``page``).
    ``on_start(prompts)`` and ``on_chunk(prompts)`` report progress."""
    from grpolab.train.lifecycle import load_task_for

    if config.eval_samples < 2:
        raise UserError(f"--eval-samples must be at least 2 (E[p(1-p)] needs two samples per prompt), got "
                        f"{config.eval_samples}")
    if band is not None:
        band = predict.check_band(band)  # a malformed band fails before any sampling
    task = load_task_for(config)
    problems = list(task.train[: config.eval_limit] if config.eval_limit else task.train)
    if on_start is not None:
        on_start(len(problems))
    successes = _sample(config, task, problems, on_chunk)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)  # the counts are kept even when the band then holds no prompt
    outputs.write_counts(outputs.counts_frame(problems, successes, config.eval_samples), out / "counts.csv")
    result = analyse(successes, config.eval_samples, band=band, model=config.model, task=config.task,
                     problem_ids=[p.id for p in problems])
    _write(result, out, task, problems, config.seed)
    return result


def _write(result: PreflightResult, out: Path, task: Task, problems: list[Problem], seed: int) -> None:
    from grpolab.preflight.page import write_page

    mask = predict.in_band(result.successes, result.n, result.band)
    control = predict.control_indices(len(problems), int(mask.sum()), seed)
    outputs.write_data_folder(out / "band", [p for p, keep in zip(problems, mask, strict=True) if keep], task.test)
    outputs.write_data_folder(out / "control", [problems[i] for i in control], task.test)
    result.files = {name: str(out / name) for name in ("counts.csv", "band", "control", "summary.json",
                                                        "preflight.html")}
    atomic_write_text(out / "summary.json", json.dumps(result.to_dict(), indent=1))
    write_page(result, out / "preflight.html", verifier=task.verifier, max_new_tokens=task.max_new_tokens)
