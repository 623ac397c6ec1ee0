"""scripts/mechanism_tables.py: the committed per-run measurements of ``grpolab mechanism`` print the
update-geometry tables of docs/when-sign-helps.md as the doc shows them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from grpolab.mechanism.summary import summarise

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "when-sign-helps.md"
FOLDERS = [  # (folder of mechanism_runs.csv, whether the doc's table shows the mean norm of one update)
    ("experiments/mechanism-embedded/middling", False),
    ("experiments/mechanism-embedded/low", False),
    ("experiments/smollm2/updates/mask_truncated_completions=false", True),
]


def _script():
    spec = importlib.util.spec_from_file_location("mechanism_tables", ROOT / "scripts" / "mechanism_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _script()


@pytest.mark.parametrize(("folder", "step_norm"), FOLDERS)
def test_the_committed_runs_print_the_docs_table(folder: str, step_norm: bool) -> None:
    table = script.update_table(summarise(pd.read_csv(ROOT / folder / "mechanism_runs.csv")), step_norm)
    lines = table.splitlines()
    doc = DOC.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4  # the header, its rule, sign and dr_grpo
    assert [line for line in lines if line not in doc] == []


@pytest.mark.parametrize("folder", ["experiments/mechanism-embedded/middling", "experiments/mechanism-embedded/low"])
def test_the_reruns_header_is_the_docs(folder: str) -> None:
    """The rerun's table has the doc's header: the same pure-noise cosine and the same kept checkpoints."""
    lines = script.update_table(summarise(pd.read_csv(ROOT / folder / "mechanism_runs.csv"))).splitlines()
    assert lines[0] in DOC.read_text(encoding="utf-8").splitlines()


def test_a_negative_bound_prints_with_the_minus_sign() -> None:
    row = pd.Series({"mean": 0.122, "ci_low": -0.033, "ci_high": 0.278})
    assert script._interval(row, 1, 100, signed=True) == "+12.2 [\N{MINUS SIGN}3.3, +27.8]"


def test_a_summary_without_a_measure_is_refused() -> None:
    summary = pd.DataFrame(
        {
            "part": ["updates"],
            "measure": ["successive_cosine"],
            "estimator": ["sign"],
            "phase": [None],
            "mean": [0.5],
            "ci_low": [0.4],
            "ci_high": [0.6],
        }
    )
    with pytest.raises(SystemExit, match="0 rows of 'successive_noise_cosine'"):
        script.update_table(summary)
