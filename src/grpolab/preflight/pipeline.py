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
from grpolab.io import atomic_write_text, check_output_folder
from grpolab.preflight import outputs, predict
from grpolab.preflight.result import PreflightResult
from grpolab.tasks import Problem, Task

__all__ = ["PreflightResult", "analyse", "preflight"]


def analyse(successes: Any, n: int, *, band: tuple[float, float] | None = None, model: str = "", task: str = "",
            problem_ids: list[str] | None = None, seed: int = 0,
            sampling: dict[str, Any] | None = None) -> PreflightResult:
    """The predictions of counts successes [P] of n samples each, without sampling anything; ``seed`` draws the
    held-out halves behind the band's share (``predict.held_out_band_degenerate``), ``sampling`` records how the
    counts were sampled. A band holding no prompt gives ``band_size`` 0 (``PreflightResult.empty_band``)."""
    counts = np.asarray(successes, dtype=int)
    table = predict.group_table(counts, n)
    group_size = predict.recommend_group_size(table)
    chosen = band if band is not None else predict.band_for(group_size)
    size = int(predict.band_mask(counts, n, chosen).sum())
    band_degenerate = predict.held_out_band_degenerate(counts, n, chosen, group_size, seed=seed) if size else np.nan
    return PreflightResult(model, task, n, list(problem_ids or [str(i) for i in range(counts.size)]), counts, table,
                           float(counts.mean() / n), predict.mean_p_variance(counts, n), group_size, chosen,
                           size, float(band_degenerate), sampling=dict(sampling or {}))


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
    out = check_output_folder(out_dir)  # an unwritable --out fails before the sampling, not after it
    task = load_task_for(config)
    problems = list(task.train[: config.eval_limit] if config.eval_limit else task.train)
    if on_start is not None:
        on_start(len(problems))
    successes = _sample(config, task, problems, on_chunk)
    outputs.write_counts(outputs.counts_frame(problems, successes, config.eval_samples), out / "counts.csv")
    result = analyse(successes, config.eval_samples, band=band, model=config.model, task=config.task,
                     problem_ids=[p.id for p in problems], seed=config.seed, sampling=_sampling(config, task))
    _write(result, out, task, problems, config.seed)
    return result


def _sampling(config: TrainConfig, task: Task) -> dict[str, Any]:
    """How the counts were sampled, which a run on the band must repeat to see the prompts preflight measured."""
    return {"temperature": config.temperature, "max_new_tokens": config.max_new_tokens or task.max_new_tokens,
            "use_chat_template": task.use_chat_template, "verifier": task.verifier, "seed": config.seed}


def _write(result: PreflightResult, out: Path, task: Task, problems: list[Problem], seed: int) -> None:
    """The band and control folders (none for an empty band), summary.json and the page."""
    from grpolab.preflight.page import write_page

    names = ["counts.csv", "summary.json", "preflight.html"]
    if result.band_size:
        mask = predict.band_mask(result.successes, result.n, result.band)
        control = predict.control_indices(len(problems), result.band_size, seed)
        outputs.write_data_folder(out / "band", [p for p, keep in zip(problems, mask, strict=True) if keep],
                                  task.test)
        outputs.write_data_folder(out / "control", [problems[i] for i in control], task.test)
        names[1:1] = ["band", "control"]
    result.files = {name: str(out / name) for name in names}
    atomic_write_text(out / "summary.json", json.dumps(result.to_dict(), indent=1))
    write_page(result, out / "preflight.html")
    if not result.band_size:  # an earlier pre-flight's folders in the same --out would read as this one's band
        for name in ("band", "control"):
            outputs.remove_data_folder(out / name)
