"""A compare directory's result runs, exported one folder each, narrowed by arm and seed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from grpolab.cli import main
from grpolab.errors import UserError
from grpolab.export import export
from grpolab.export.sweep import result_runs

pytestmark = pytest.mark.fast

_RUNS = [("sign", 0), ("sign", 1), ("dr_grpo+dynamic", 0)]


def _compare_dir(run: Path, where: Path) -> Path:
    """A compare output listing three result runs (copies of ``run``) in results.parquet, two rows (start, end)
    each, and an lr-selection run that is never exported."""
    out = where / "cmp"
    rows = []
    for estimator, seed in _RUNS:
        run_id = f"{estimator}-G4-seed{seed}"
        shutil.copytree(run, out / "runs" / run_id)
        rows += [{"run_id": run_id, "variant": "", "estimator": estimator, "seed": seed, "group_size": 4,
                  "status": "finished", "phase": phase} for phase in ("start", "end")]
    shutil.copytree(run, out / "selection" / "sign-G4-lr0.001-seed1000")
    pd.DataFrame(rows).to_parquet(out / "results.parquet")
    (out / "compare.yaml").write_text("# written by grpolab\n")
    return out


def test_every_result_run_is_exported_into_a_folder_of_its_own(full_run: Path, tmp_path: Path) -> None:
    out = _compare_dir(full_run, tmp_path)
    written = export(out, tmp_path / "models")
    names = [f"{estimator}-G4-seed{seed}" for estimator, seed in _RUNS]
    assert [w.folder for w in written] == [tmp_path / "models" / name for name in names]
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == sorted(names)
    for name in names:
        assert (tmp_path / "models" / name / "model.safetensors").is_file()
        assert f"the run `{out / 'runs' / name}`" in (tmp_path / "models" / name / "README.md").read_text()


@pytest.mark.parametrize(("arms", "seeds", "expected"), [
    (["sign"], [], ["sign-G4-seed0", "sign-G4-seed1"]),
    ([], [0], ["sign-G4-seed0", "dr_grpo+dynamic-G4-seed0"]),
    (["dr_grpo+dynamic", "sign"], [1], ["sign-G4-seed1"]),
])
def test_arms_and_seeds_narrow_the_runs(arms, seeds, expected, full_run: Path, tmp_path: Path) -> None:
    out = _compare_dir(full_run, tmp_path)
    assert [name for name, _ in result_runs(out, arms=arms, seeds=seeds)] == expected


def test_an_arm_or_seed_the_comparison_lacks_is_refused(full_run: Path, tmp_path: Path) -> None:
    out = _compare_dir(full_run, tmp_path)
    with pytest.raises(UserError, match="has no estimator 'grpo' \\(--arm\\); it has dr_grpo\\+dynamic, sign"):
        result_runs(out, arms=["grpo"])
    with pytest.raises(UserError, match="has no seed 7 \\(--seed\\); it has 0, 1"):
        result_runs(out, seeds=[7])


def test_a_diverged_run_of_the_comparison_is_refused_naming_it(full_run: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = _compare_dir(full_run, tmp_path)
    diverged = out / "runs" / "sign-G4-seed1"
    (diverged / "summary.json").write_text(json.dumps({"status": "diverged", "diverged_at_step": 1, "reason": "nan"}))
    assert main(["export", str(out), "--out", str(tmp_path / "models")]) == 2
    assert f"run {diverged} diverged at step 1" in capsys.readouterr().err
    assert not (tmp_path / "models").exists()
    assert main(["export", str(out), "--out", str(tmp_path / "models"), "--seed", "0"]) == 0  # the others export
    assert len(list((tmp_path / "models").iterdir())) == 2


def test_a_compare_directory_without_results_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "compare.yaml").write_text("# written by grpolab\n")
    with pytest.raises(UserError, match=r"holds no results\.parquet"):
        export(tmp_path / "cmp", tmp_path / "out")
