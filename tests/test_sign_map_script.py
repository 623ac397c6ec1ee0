"""scripts/sign_map.py's table on a committed sweep table: each gain over dr_grpo paired by seed, Welch's only
with --unpaired, and the verdict lines name the test; and its per-cell rows carry the compute each arm trained, as
a mean over seeds where every run recorded it and "not recorded" where not, read from the kept runs.csv copies."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from grpolab.pairing import UNPAIRED_NOTE
from grpolab.stats import PAIRED_TESTS, sign_flip_floor

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("sign_map", ROOT / "scripts" / "sign_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module




script = _script()


def _runs(trained: dict[str, list[float]] | None) -> pd.DataFrame:
    rows = []
    for estimator, ends in (("dr_grpo", [0.5, 0.7]), ("sign", [0.8, 0.9])):
        for seed, end in enumerate(ends):
            row = {
                "role": "result",
                "estimator": estimator,
                "seed": seed,
                "group_size": 2,
                "lr": 1e-3,
                "start_pass_at_1": 0.5,
                "end_pass_at_1": end,
            }
            if trained is not None:
                row.update({name: values[seed] * (2 if estimator == "sign" else 1) for name, values in trained.items()})
            rows.append(row)
    return pd.DataFrame(rows)


def test_each_cell_carries_the_mean_compute_its_runs_recorded() -> None:
    trained = {name: [100.0, 300.0] for name in script.TRAINED}
    rows = {r["estimator"]: r for r in script._cell_rows(_runs(trained), "mixed", "clip1")}
    assert rows["dr_grpo"]["trained_tokens"] == 200.0 and rows["sign"]["trained_tokens"] == 400.0
    shown = script._markdown(pd.DataFrame(rows.values())[["estimator", *script.TRAINED]])
    assert "| sign | 400 | 400 | 400 | 400 | 400 |" in shown


def test_runs_older_than_the_counters_show_not_recorded(tmp_path: Path) -> None:
    _runs(None).to_csv(tmp_path / "mixed-clip1.csv", index=False)  # a kept copy, as in experiments/sign-map/runs
    args = type("Args", (), {"out": tmp_path, "levels": "mixed", "clipping": "clip1", "unpaired": False})()
    table = script._map_table(args)
    assert len(table) == 2 and all(math.isnan(v) for v in table[list(script.TRAINED)].to_numpy().ravel())
    assert "| dr_grpo | " + " | ".join(["not recorded"] * 5) + " |" in script._markdown(
        table[["estimator", *script.TRAINED]]
    )


def test_each_gain_is_paired_by_seed_unless_asked() -> None:
    runs = pd.read_csv(ROOT / "experiments" / "sign-map" / "runs" / "mixed-clip1.csv")
    table = pd.DataFrame(script._cell_rows(runs, "mixed", "clip1"))
    nsr = table[(table["estimator"] == "nsr") & (table["group_size"] == 2)].iloc[0]
    result = runs[(runs["role"] == "result") & (runs["group_size"] == 2)]
    a, b = (
        result[result["estimator"] == name].sort_values("seed")["end_pass_at_1"].to_numpy()
        for name in ("nsr", "dr_grpo")
    )
    assert nsr["test"] in PAIRED_TESTS
    assert nsr["gain_p"] == pytest.approx(max(scipy_stats.ttest_rel(a, b).pvalue, sign_flip_floor(10)))
    assert script._verdict(table).startswith("Test: paired t")
    welch = pd.DataFrame(script._cell_rows(runs, "mixed", "clip1", unpaired=True))
    nsr = welch[(welch["estimator"] == "nsr") & (welch["group_size"] == 2)].iloc[0]
    assert nsr["test"] == "Welch"
    assert nsr["gain_p"] == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert UNPAIRED_NOTE in script._verdict(welch)
