"""``grpolab eval --from-samples PATH...``: re-score lm-eval or lighteval per-sample files and print, per task,
n, prompts, avg@n, pass@k, maj@k and pass^k for every k <= n with standard errors, beside lighteval's names
for the same numbers (``grpolab.harness_samples``, ``grpolab.diagnostics.sampled``)."""

from __future__ import annotations

import json
import math
from typing import Any

from grpolab.io import atomic_write_text
from grpolab.progress import results_console as console


def score_files(paths: list[str], verifier: str | None) -> list[Any]:
    """Every harness file the paths name, read and re-scored (``TaskScore`` each, in order)."""
    from grpolab.harness_samples import find_sample_files, read_samples, rescore

    return [rescore(read_samples(path), verifier) for path in find_sample_files(paths)]


def task_dict(score: Any) -> dict[str, Any]:
    """One task's result as JSON-ready numbers: ``metrics`` and ``se`` keyed ``avg@n``, ``pass@4``, ...; ``n`` is
    the fewest samples of a document (the largest k), ``n_max`` the most."""
    samples = score.samples
    return {"task": samples.task, "harness": samples.source, "file": str(samples.path), "verifier": score.verifier,
            "responses_scored": samples.response_count, "unscorable": score.unscorable,
            "records_read": samples.records, **score.metrics.to_dict(), "n_max": int(score.n.max())}


def run(args: Any) -> int:
    scores = score_files(args.from_samples, args.verifier)
    data = {"tasks": [task_dict(score) for score in scores]}
    if args.out:
        atomic_write_text(args.out, json.dumps(data, indent=1))
    if args.json:
        print(json.dumps(data))
        return 0
    for score in scores:
        _print_task(task_dict(score), maj=score.votes is not None)
    return 0


def _number(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4f}"


def _print_task(task: dict[str, Any], maj: bool) -> None:
    extra = task["records_read"] - task["prompts"]
    n = task["n"] if task["n_max"] == task["n"] else f"{task['n']} to {task['n_max']} (k up to {task['n']})"
    lines = [f"{task['task']} ({task['harness']}, {task['file']}): verifier {task['verifier']}, {task['prompts']} "
             f"prompts, n = {n}",
             f"scored {task['responses_scored']} responses of {task['prompts']} documents ({task['records_read']} "
             f"{'lines' if task['harness'] == 'lm-eval' else 'rows'} read, {extra} of them further filters of a "
             f"document); {task['unscorable']} unscorable (counted wrong)"]
    if not maj:
        lines.append(f"maj@k: not reported, the verifier {task['verifier']} extracts no answer to vote on")
    for line in [*lines, *metric_table(task), ""]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def metric_table(sampled: dict[str, Any]) -> list[str]:
    """The lines of a ``SampledMetrics.to_dict()`` table: each key, its value, its SE and lighteval's name."""
    lines = [f"{'metric':<10} {'value':>8} {'SE':>8}  lighteval"]
    for key, value in sampled["metrics"].items():
        se, name = _number(sampled["se"][key]), sampled["lighteval"].get(key, "-")
        lines.append(f"{key:<10} {_number(value):>8} {se:>8}  {name}")
    return lines
