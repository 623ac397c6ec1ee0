"""scripts/smollm2_mechanism_table.py: the committed SmolLM2 mechanism table is the Student-t summary of the
committed per-run measurements."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "experiments" / "smollm2"


def test_the_committed_table_is_the_t_summary_of_the_committed_runs(tmp_path: Path) -> None:
    shutil.copy(DATA / "mechanism_runs.csv", tmp_path / "mechanism_runs.csv")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "smollm2_mechanism_table.py"), "--dest", str(tmp_path),
                    "--figure", str(tmp_path / "mechanism.png")], check=True, cwd=ROOT)
    made, committed = pd.read_csv(tmp_path / "mechanism.csv"), pd.read_csv(DATA / "mechanism.csv")
    pd.testing.assert_frame_equal(made, committed)
    assert "Student-t" in (tmp_path / "mechanism.md").read_text()
    assert "bootstrap" not in (DATA / "mechanism.md").read_text()
    runs = pd.read_csv(DATA / "mechanism_runs.csv")
    values = runs[(runs["estimator"] == "sign") & (runs["measure"] == "dlogp") & (runs["token_class"] == "content")
                  & (runs["outcome"] == "wrong")]["value"].to_numpy()
    row = committed[(committed["estimator"] == "sign") & (committed["measure"] == "dlogp")
                    & (committed["token_class"] == "content") & (committed["outcome"] == "wrong")].iloc[0]
    half = 2.776445 * np.std(values, ddof=1) / np.sqrt(5)  # t_{4, 0.975} * s / sqrt(5), 5 seeds
    assert len(values) == 5
    assert row["ci_low"] == pytest.approx(values.mean() - half, rel=1e-5)
    assert row["ci_high"] == pytest.approx(values.mean() + half, rel=1e-5)
