"""scripts/gradient_geometry_tables.py: the per-run results committed in experiments/gradient-geometry/ (written
with ``--save``) are the runs of the table's grid, and ``--load`` prints from them the tables of
docs/gradient-geometry.md as the doc shows them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "experiments" / "gradient-geometry"
DOC = ROOT / "docs" / "gradient-geometry.md"
RUN_FLAGS = {
    "--model": "model",
    "--task": "task",
    "--advantage": "advantage",
    "--group-size": "group_size",
    "--prompts": "prompts",
    "--seed": "seed",
    "--reward-granularity": "reward_granularity",
}


def _script():
    spec = importlib.util.spec_from_file_location(
        "gradient_geometry_tables", ROOT / "scripts" / "gradient_geometry_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()
SAVED_TABLES = sorted(path.stem for path in SAVED.glob("*.json"))


def _settings(argv: list[str]) -> dict[str, str]:
    """The run settings one ``grpolab gradients`` command of the grid asks for (outcome rewards by default)."""
    settings = {"reward_granularity": "outcome"}
    settings.update({key: argv[argv.index(flag) + 1] for flag, key in RUN_FLAGS.items() if flag in argv})
    return settings


def _saved(table: str) -> list[dict]:
    return json.loads((SAVED / f"{table}.json").read_text(encoding="utf-8"))


def test_the_embedded_tables_are_committed() -> None:
    assert {"arith", "reverse"} <= set(SAVED_TABLES)


@pytest.mark.parametrize("table", SAVED_TABLES)
def test_the_saved_runs_are_the_grid_of_the_table(table: str) -> None:
    runs = _saved(table)
    seeds = sorted({str(run["seed"]) for run in runs})
    grid = [_settings(argv) for argv in script.commands(table, seeds)]
    saved = [{key: str(run[key]) for key in grid[0]} for run in runs]
    assert saved == grid


@pytest.mark.parametrize("table", SAVED_TABLES)
def test_the_saved_runs_print_the_docs_table(table: str) -> None:
    printed = script.markdown(table, _saved(table)).splitlines()
    doc = DOC.read_text(encoding="utf-8").splitlines()
    assert len(printed) == 2 + len(script.cells(table, script.TRAINED))
    assert [line for line in printed if line not in doc] == []


def _cell_means(table: str, key: str, advantage: str) -> list[float]:
    """Per group size, the mean of ``key`` over the seeds of ``advantage``'s runs in the saved table."""
    runs = [run for run in _saved(table) if run["advantage"] == advantage]
    sizes = sorted({run["group_size"] for run in runs})
    return [script._mean([run for run in runs if run["group_size"] == size], key) for size in sizes]


def test_the_arith_readings_quote_the_saved_runs() -> None:
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    zero = _cell_means("arith", "grad/zero_advantage_completions", "dr_grpo")
    assert f"({min(zero):.0%}-{max(zero):.0%} of completions here)".replace("%-", "-") in doc
    sign, dr_grpo = (_cell_means("arith", "grad/sparsity", name) for name in ("sign", "dr_grpo"))
    assert f"(`sparsity` {min(sign):.2f}-{max(sign):.2f} vs {min(dr_grpo):.2f}-{max(dr_grpo):.2f})" in doc
    smallest = [run for run in _saved("arith") if run["advantage"] == "dr_grpo" and run["group_size"] == 2]
    mixed = [run["metrics"]["grad/mixed_groups"] for run in smallest]
    assert f"{min(mixed):.0f}-{max(mixed):.0f} mixed groups per batch" in doc
    assert f"energy90 is already {script._mean(smallest, 'grad/weighted_energy90'):.1f} there" in doc


def test_the_smollm2_readings_quote_the_saved_runs() -> None:
    runs = {(run["model"] == "smollm2-135m", run["reward_granularity"]): run["metrics"] for run in _saved("smollm2")}
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    trained, trained_token = runs[(False, "outcome")], runs[(False, "token")]
    group = "grad/weighted_group_effective_rank"
    assert f"per-group weighted matrix has effective rank {runs[(True, 'token')][group]:.2f}" in doc
    assert f"({trained['grad/mixed_groups']:.0f} of 8)" in doc
    assert f"per-group rank is {trained[group]:.2f}" in doc and f"it falls to {trained_token[group]:.2f}" in doc
    assert f"({trained[group]:.2f} -> {trained_token[group]:.2f})" in doc
    weighted = "grad/weighted_effective_rank"
    assert f"`weighted` falls ({trained[weighted]:.2f} -> {trained_token[weighted]:.2f})" in doc
    assert trained[weighted] > trained_token[weighted]  # "falls" is what the file says


def test_the_bfloat16_row_sum_error_the_doc_states_is_the_saved_one() -> None:
    errors = [run["metrics"]["grad/row_sum_error"] for run in _saved("smollm2") if run["metrics"]["grad/dim"]]
    errors = [e for e in errors if e > 0]  # the starved outcome batch has no gradient to compare
    doc = " ".join(DOC.read_text(encoding="utf-8").split())
    assert "it reads 0.03-0.04, bfloat16 rounding" in doc
    assert len(errors) == 3 and 0.025 <= min(errors) and max(errors) < 0.045
