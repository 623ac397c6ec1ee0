"""Every committed experiment config runs, in a reduced form, with the command its doc gives.

The reductions only shrink budgets (steps, prompts, seeds, evaluation size, completion length); the model,
task, verifier, estimators, LoRA and precision settings are the config's own (a config that names no estimators
runs with the ones the commands in its comments add, as its doc runs it: ``_doc_estimators``), so a change that
breaks the real experiment breaks this test. The runs train in this process (``in_process_workers``,
tests/conftest.py), and a model is loaded from its files once per module (``one_load_per_model``): what is tested
is the configs, not the sweep's worker processes (``tests/sweep/test_signals.py`` runs those) nor a second parse
of the same file.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import grpolab.models as models
from grpolab.cli import main
from grpolab.config import CompareConfig, TrainConfig, load_config_file
from optional_models import skip_without_model

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
REDUCED = ["--seeds", "1", "--selection-seeds", "1", "--steps", "1", "--prompts-per-step", "2",
           "--group-sizes", "2", "--eval-limit", "2", "--eval-samples", "2", "--workers", "2", "--no-report"]


CONFIGS = sorted(EXPERIMENTS.glob("*/*.yaml"))


def _reduced_vary(settings: dict) -> list[str]:
    """A ``prompts_per_step`` axis shrunk to as many small values (its budget), any other axis as it is."""
    name, _, values = str(settings.get("vary", "")).partition("=")
    if name.strip() != "prompts_per_step":
        return []
    return ["--vary", "prompts_per_step=" + ",".join(str(2 + i) for i in range(len(values.split(","))))]


def _doc_estimators(config: Path) -> str:
    """The estimators the commands in ``config``'s comments pass (``--estimators A,B`` in each), in order, once
    each; "" where they pass none."""
    named = re.findall(r"--estimators[ =]([\w+,]+)", "\n".join(
        line for line in config.read_text().splitlines() if line.lstrip().startswith("#")))
    return ",".join(dict.fromkeys(name for names in named for name in names.split(",") if name))


@pytest.fixture(scope="module")
def one_load_per_model() -> Iterator[None]:
    """``grpolab.models._load_from_pretrained`` really run once per (model, options) in this module, each load
    handed a deep copy of that first, untouched result: the SmolLM2 configs' runs parse its GGUF file (seconds each
    time, three times per load) once between them, and each run still trains a model of its own."""
    loaded: dict[tuple[str, str], Any] = {}
    real = models._load_from_pretrained

    def load(location: str | Path, extra: dict[str, Any]) -> Any:
        key = (str(location), json.dumps(extra, sort_keys=True, default=str))
        if key not in loaded:
            loaded[key] = real(location, extra)
        return copy.deepcopy(loaded[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "_load_from_pretrained", load)
        yield


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_compare_config_runs_reduced(config: Path, tmp_path: Path, in_process_workers: None,
                                     one_load_per_model: None) -> None:
    settings = load_config_file(config)
    if settings.get("use_vllm"):
        pytest.skip("needs CUDA, vLLM and its model; tests/integrations/test_trl_paper1.py runs it reduced")
    defaults = TrainConfig()
    skip_without_model(settings.get("model", defaults.model))
    doc = _doc_estimators(config)  # a config without estimators runs with those its doc's commands add
    estimators = settings.get("estimators", doc or CompareConfig().estimators).split(",")  # else the default set
    # one lr of the grid (the selection itself is tested on `embedded`), or the config's one lr
    grid = settings.get("lrs", None if "lr" in settings else CompareConfig().lrs)  # no lr given: the default grid
    lrs = grid.split(",")[1:2] if grid else []
    task_options = {**settings.get("task_options", {}), "max_new_tokens": 8}
    out = tmp_path / "out"
    code = main(["compare", "--config", str(config), "--out", str(out), *REDUCED, *_reduced_vary(settings),
                 *(["--estimators", doc] if doc and "estimators" not in settings else []),
                 *(["--lrs", ",".join(lrs)] if lrs else []),
                 "--task-options", pd.Series([task_options]).to_json(orient="values")[1:-1]])
    assert code == 0
    results = pd.read_parquet(out / "results.parquet")
    variants = len(settings["vary"].split("=", 1)[1].split(",")) if settings.get("vary") else 1  # one axis
    assert set(results["estimator"]) == set(estimators)
    assert set(results["lr"]) == ({float(lr) for lr in lrs} if lrs else {float(settings.get("lr", defaults.lr))})
    assert set(results["phase"]) == {"start", "end"}
    assert set(results["model"]) == {settings.get("model", defaults.model)}
    assert set(results["task"]) == {settings.get("task", defaults.task)}
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["estimator"]) == sorted(estimators * variants) and runs["end_greedy"].between(0, 1).all()
