"""A comparison's saved ``OUT/compare.yaml`` as ``grpolab compare --config``: it reruns the comparison as it was
made (``grpolab.sweep.settings.settings_to_rerun``). It was refused: the file records when its primary comparison was
declared, and holds the base config's unused ``lr`` beside its ``lrs`` grid."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from grpolab.cli import main
from grpolab.sweep.settings import DECLARATION_KEYS, settings_to_rerun

TINY = ["--estimators", "sign", "--seeds", "1", "--group-sizes", "2", "--lrs", "1e-3,3e-3", "--selection-seeds", "1",
        "--lr-bracket-rounds", "0", "--steps", "2", "--prompts-per-step", "4", "--eval-limit", "8",
        "--eval-samples", "2", "--workers", "1", "--no-report"]


def test_a_saved_compare_yaml_reruns_the_comparison_into_a_new_out(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["compare", *TINY, "--out", str(first)]) == 0
    assert main(["compare", "--config", str(first / "compare.yaml"), "--out", str(second)]) == 0
    columns = ["estimator", "group_size", "seed", "lr", "phase", "step", "greedy_accuracy", "successes"]
    before, after = (pd.read_parquet(out / "results.parquet") for out in (first, second))
    pd.testing.assert_frame_equal(before[columns].reset_index(drop=True), after[columns].reset_index(drop=True))
    assert sorted(before["lr"].unique()) == sorted(after["lr"].unique())


def test_only_a_saved_file_loses_its_record_and_its_unused_lr() -> None:
    values = {"lrs": "1e-3,3e-3", "lr": 1e-4, "seeds": 3, **dict.fromkeys(DECLARATION_KEYS, "x")}
    assert settings_to_rerun(values, saved=True) == {"lrs": "1e-3,3e-3", "seeds": 3}
    assert settings_to_rerun(values, saved=False) == values  # a hand-written file is refused as written
    assert settings_to_rerun({"lrs": "", "lr": 1e-4}, saved=True) == {"lrs": "", "lr": 1e-4}  # one lr, no grid


def test_a_single_lr_sweep_records_its_lr_and_reruns_from_its_saved_file(tmp_path: Path) -> None:
    # was: compare.yaml recorded lr 0.0001 while every run trained at 0.001, and the rerun refused its own command
    from grpolab.config.files import read_saved_settings

    first, second = tmp_path / "first", tmp_path / "second"
    single = [*TINY[:TINY.index("--lrs")], "--lrs", "1e-3", *TINY[TINY.index("--lrs") + 2:]]
    assert main(["compare", *single, "--out", str(first)]) == 0
    assert read_saved_settings(first / "compare.yaml")["lr"] == 1e-3
    assert main(["compare", "--config", str(first / "compare.yaml"), "--out", str(first)]) == 0  # resumes: done
    assert main(["compare", "--config", str(first / "compare.yaml"), "--out", str(second)]) == 0
    assert read_saved_settings(second / "compare.yaml")["lr"] == 1e-3
    for out in (first, second):
        assert set(pd.read_parquet(out / "results.parquet")["lr"]) == {1e-3}


def test_a_sweep_saved_with_the_unused_default_lr_beside_one_lrs_value_still_resumes() -> None:
    from grpolab.sweep.settings import _changes

    old = {"lrs": "0.001", "lr": 1e-4, "seeds": 1}  # saved before one lr in lrs was recorded as lr
    assert _changes(old, {"lrs": "0.001", "lr": 1e-3, "seeds": 1}) == []
    assert _changes(old, {"lrs": "0.003", "lr": 3e-3, "seeds": 1}) == [("lrs", "0.001", "0.003")]
    assert _changes({"lrs": "", "lr": 1e-4}, {"lrs": "", "lr": 1e-3}) == [("lr", 1e-4, 1e-3)]  # --lr alone
