"""Earlier results of the same configuration: whether a primary comparison declared before a sweep's own runs was
still chosen with results of the same runs in view.

A primary pair named before any run of a sweep trained is a declaration before *this sweep's* results, not before
all results: the same estimators may have been run on the same settings in another sweep folder, or committed under
``experiments/``. ``earlier_results`` looks for such sweeps when the primary is declared, in the folders beside the
sweep's ``--out`` and in the committed ``experiments/`` folders, and the sweep records what it found
(``primary_earlier_results`` in ``compare.yaml``, ``grpolab.sweep.settings.primary_declaration``), so the report
says "declared before any result" only where nothing was found (``grpolab.report.verdict.declaration_line``).

Same configuration: the same training settings (``TrainConfig``, resolved with a sweep's defaults, leaving out the
settings a sweep sets for each run, such as seed, lr and group size, and the runtime-only ones, such as threads and
device), and at least one estimator of the primary pair among the earlier sweep's estimators. A folder counts when
its ``compare.yaml`` gives that configuration and it holds results (``results.parquet``, ``runs.csv``, or a run that
trained a step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpolab.config import CompareConfig, TrainConfig
from grpolab.config.fields import runtime_only, sweep_owned
from grpolab.config.files import build_config, load_config_file, split_file_values
from grpolab.errors import UserError

__all__ = ["EXPERIMENTS", "configuration", "earlier_results", "search_roots"]

EXPERIMENTS = "experiments"  # the committed experiments of a grpolab checkout
_IGNORED = frozenset(sweep_owned(TrainConfig)) | runtime_only(TrainConfig)
_RESULT_FILES = ("results.parquet", "runs.csv")


def configuration(train: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The training settings that make two sweeps' runs the same runs: ``train`` (a sweep's training settings, or a
    config file's) over ``defaults``, resolved by ``TrainConfig``, without the per-run and runtime-only settings."""
    values = {**defaults, **train}
    resolved = build_config({k: v for k, v in values.items() if k not in sweep_owned(TrainConfig)}).to_dict()
    return {name: value for name, value in resolved.items() if name not in _IGNORED}


def search_roots(out: Path) -> list[Path]:
    """Where earlier results are looked for: the folder that holds ``out``, and the committed ``experiments/`` of
    the working directory and of the grpolab checkout this package runs from (where they exist)."""
    package_root = Path(__file__).resolve().parents[3]  # src/grpolab/sweep/earlier.py -> the checkout
    roots = [Path(out).resolve().parent, Path.cwd() / EXPERIMENTS, package_root / EXPERIMENTS]
    unique: list[Path] = []
    for root in roots:
        if root.is_dir() and root.resolve() not in unique:
            unique.append(root.resolve())
    return unique


def _has_results(folder: Path) -> bool:
    return any((folder / name).is_file() for name in _RESULT_FILES) or any(
        log.stat().st_size for log in folder.glob("*/*/metrics.jsonl")
    )


def _same(folder: Path, wanted: dict[str, Any], primary: set[str], defaults: dict[str, Any]) -> bool:
    """Whether the sweep or experiment in ``folder`` ran an estimator of ``primary`` on the configuration
    ``wanted``; a file that is not a readable config is no such sweep."""
    try:
        values = load_config_file(folder / "compare.yaml")
        compare, train = split_file_values(
            {k: v for k, v in values.items() if not k.startswith("primary")}, CompareConfig, TrainConfig
        )
        estimators = compare.get("estimators", CompareConfig().estimators)
        names = {name.strip() for name in str(estimators).split(",")}
        return bool(names & primary) and configuration(train, defaults) == wanted
    except (UserError, ValueError, TypeError):
        return False


def earlier_results(
    out: Path, train: dict[str, Any], primary: str, defaults: dict[str, Any], roots: list[Path] | None = None
) -> list[str]:
    """The folders (other than ``out``) under ``roots`` (default ``search_roots(out)``) whose sweep ran an estimator
    of ``primary`` ("A,B") on the training settings ``train`` and holds results, as paths."""
    wanted = configuration(train, defaults)
    pair = {name.strip() for name in primary.split(",") if name.strip()}
    own = Path(out).resolve()
    found = []
    for root in roots if roots is not None else search_roots(out):
        for folder in sorted(p for p in Path(root).iterdir() if (p / "compare.yaml").is_file()):
            if folder.resolve() != own and _has_results(folder) and _same(folder, wanted, pair, defaults):
                found.append(str(folder))
    return found
