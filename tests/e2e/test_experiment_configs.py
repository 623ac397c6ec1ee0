"""Every committed experiment config runs, in a reduced form, with the command its doc gives.

The reductions only shrink budgets (steps, prompts, seeds, evaluation size, completion length); the model,
task, verifier, estimators, LoRA and precision settings are the config's own, so a change that breaks the
real experiment breaks this test. A config on the default (embedded) model trains in this process
(``in_process_workers``, tests/conftest.py): a worker would take longer to start than its runs to train. A config
that names a model (SmolLM2) keeps the two spawned workers: its runs outlast their start, and run in parallel.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from grpolab.cli import main
from grpolab.config import CompareConfig, TrainConfig, load_config_file

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


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_compare_config_runs_reduced(config: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    settings = load_config_file(config)
    if "model" not in settings:  # the embedded model: its runs train faster than a worker starts
        request.getfixturevalue("in_process_workers")
    if settings.get("use_vllm"):
        pytest.skip("needs CUDA, vLLM and its model; tests/integrations/test_trl_paper1.py runs it reduced")
    defaults = TrainConfig()
    estimators = settings["estimators"].split(",")
    # one lr of the grid (the selection itself is tested on `embedded`), or the config's one lr
    grid = settings.get("lrs", None if "lr" in settings else CompareConfig().lrs)  # no lr given: the default grid
    lrs = grid.split(",")[1:2] if grid else []
    task_options = {**settings.get("task_options", {}), "max_new_tokens": 8}
    out = tmp_path / "out"
    code = main(["compare", "--config", str(config), "--out", str(out), *REDUCED, *_reduced_vary(settings),
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
