"""grpolab tasks as lm-eval 0.4 task YAMLs (``grpolab lm-eval-tasks``).

For a task, the test split as grpolab builds it (its prompts, rendered with the task's template, and its references)
is written as ``grpolab_<task>.jsonl`` with the fields ``id``, ``prompt`` and ``reference``, and beside it
``grpolab_<task>.yaml``, an lm-eval task that reads that file (``dataset_path: json`` with an absolute
``data_files``, so it runs offline from any working directory) with ``output_type: generate_until``,
``repeats: n`` and the task's generation settings (temperature, token budget). The prompt is the ``prompt``
column as it is, with no few-shot examples and no description, so that lm-eval asks the model exactly what
``grpolab eval`` asks it.

``until`` is empty: grpolab's own evaluation stops at EOS only, and every lm-eval backend adds the EOS text
(lm-eval's ``hf`` backend does; grpolab's sampler stops there). lm-eval's own metric (``exact_match`` of the
first repeat against the reference) is a sanity check only; ``grpolab eval --from-samples`` scores every
repeat with the task's verifier (``TASK_VERIFIERS`` in ``grpolab.harness_samples.rescore`` names the verifier
of each ``grpolab_<task>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.tasks import Problem, Task

__all__ = ["PREFIX", "GenerationSettings", "WrittenTask", "lm_eval_task_name", "task_config", "write_task"]

PREFIX = "grpolab_"
"""lm-eval's name of a grpolab task is this prefix and the task's name (``grpolab_reverse``)."""


@dataclass(frozen=True)
class GenerationSettings:
    """How lm-eval samples a task: ``repeats`` samples per prompt, at ``temperature`` (0: greedy), at most
    ``max_new_tokens`` tokens each."""

    repeats: int
    temperature: float
    max_new_tokens: int


@dataclass(frozen=True)
class WrittenTask:
    """What ``write_task`` wrote: lm-eval's task name, the YAML, the data file and its number of documents."""

    name: str
    yaml_path: Path
    data_path: Path
    documents: int


def lm_eval_task_name(task_name: str) -> str:
    """lm-eval's name of a grpolab task: ``grpolab_`` and the name, with anything but letters, digits and ``_``
    made ``_`` (a task given by import path, ``pkg.module:builder``, becomes ``grpolab_pkg_module_builder``)."""
    return PREFIX + "".join(c if c.isalnum() or c == "_" else "_" for c in task_name)


def task_config(name: str, data_path: Path, settings: GenerationSettings, metadata: dict[str, Any]) -> dict[str, Any]:
    """The lm-eval task config (the YAML's content) of task ``name`` reading ``data_path``."""
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_path.resolve())}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "prompt",  # a column name: the column's text as it is, no template
        "doc_to_target": "reference",
        "target_delimiter": "",
        "repeats": settings.repeats,
        "generation_kwargs": {
            "until": [],
            "do_sample": settings.temperature > 0,
            "temperature": settings.temperature,
            "max_gen_toks": settings.max_new_tokens,
        },
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1, **metadata},
    }


def _rows(problems: list[Problem]) -> str:
    return "".join(json.dumps({"id": p.id, "prompt": p.prompt, "reference": p.reference}) + "\n" for p in problems)


def write_task(task: Task, out_dir: str | Path, settings: GenerationSettings, *, limit: int | None = None,
               verifier: str | None = None) -> WrittenTask:
    """Write ``task``'s test split (its first ``limit`` problems) as an lm-eval task into ``out_dir``:
    ``grpolab_<task>.jsonl`` and ``grpolab_<task>.yaml``; other files in ``out_dir`` are left alone, so several
    tasks can share one ``--include_path`` folder.

    Raises:
        UserError: the task has no test problems, or ``out_dir`` is a file.
    """
    problems = list(task.test[:limit] if limit else task.test)
    if not problems:
        raise UserError(f"task {task.name!r} has no test problems to write; check --data and --limit")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file; give a folder for the task YAMLs")
    out.mkdir(parents=True, exist_ok=True)
    name = lm_eval_task_name(task.name)
    data_path, yaml_path = out / f"{name}.jsonl", out / f"{name}.yaml"
    metadata = {"grpolab_task": task.name, "verifier": verifier or task.verifier, "documents": len(problems)}
    atomic_write_text(data_path, _rows(problems))
    config = task_config(name, data_path, settings, metadata)
    atomic_write_text(yaml_path, yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return WrittenTask(name, yaml_path, data_path, len(problems))
