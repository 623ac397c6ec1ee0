"""grpolab.sweep.earlier: a sweep beside this one, or a committed experiment, that ran an estimator of the primary
pair on the same training settings and holds results is an earlier result; other settings, other estimators or
no results are not."""

from __future__ import annotations

from pathlib import Path

from grpolab.config import CompareConfig, TrainConfig, yaml_text
from grpolab.config.files import load_config_file, split_file_values
from grpolab.sweep.earlier import earlier_results
from grpolab.sweep.settings import COMPARE_TRAIN_DEFAULTS, sweep_train_settings

ROOT = Path(__file__).resolve().parents[2]


def _sweep(folder: Path, *, estimators: str = "sign,dr_grpo", steps: int = 20, results: bool = True) -> Path:
    folder.mkdir(parents=True)
    values = {**CompareConfig(estimators=estimators).to_dict(), **sweep_train_settings(TrainConfig(steps=steps))}
    (folder / "compare.yaml").write_text(yaml_text(values))
    if results:
        (folder / "runs.csv").write_text("role,estimator\nresult,sign\n")
    return folder


def _found(tmp_path: Path, primary: str = "sign,dr_grpo", steps: int = 20) -> list[str]:
    train = sweep_train_settings(TrainConfig(steps=steps))
    return earlier_results(tmp_path / "new", train, primary, COMPARE_TRAIN_DEFAULTS, roots=[tmp_path])


def test_a_sweep_beside_this_one_on_the_same_settings_is_an_earlier_result(tmp_path: Path) -> None:
    assert _found(tmp_path) == []
    earlier = _sweep(tmp_path / "before")
    assert _found(tmp_path) == [str(earlier)]
    assert _found(tmp_path, steps=30) == []  # other training settings: other runs
    assert _found(tmp_path, primary="rloo,grpo") == []  # no estimator of the primary pair ran there


def test_a_sweep_without_results_or_of_other_estimators_is_none(tmp_path: Path) -> None:
    _sweep(tmp_path / "planned", results=False)
    _sweep(tmp_path / "others", estimators="rloo,grpo")
    assert _found(tmp_path) == []


def test_the_sweep_itself_is_not_its_own_earlier_result(tmp_path: Path) -> None:
    _sweep(tmp_path / "new")
    assert _found(tmp_path) == []


def test_a_committed_experiment_is_found_from_its_config_file() -> None:
    """experiments/smollm2 (a config file with only the settings it changes, and its runs.csv): a sweep on its
    training settings finds it; the same with one setting changed does not."""
    values = load_config_file(ROOT / "experiments" / "smollm2" / "compare.yaml")
    _, train = split_file_values(values, CompareConfig, TrainConfig)
    settings = sweep_train_settings(TrainConfig().replace(**{**COMPARE_TRAIN_DEFAULTS, **train}))
    roots = [ROOT / "experiments"]
    found = earlier_results(Path("/nonexistent/out"), settings, "sign,dr_grpo", COMPARE_TRAIN_DEFAULTS, roots)
    assert str(ROOT / "experiments" / "smollm2") in found
    changed = {**settings, "steps": settings["steps"] + 1}
    assert earlier_results(Path("/nonexistent/out"), changed, "sign,dr_grpo", COMPARE_TRAIN_DEFAULTS, roots) == []
