"""A sweep directory owns its settings: refused when they change after a run trained, adopted from a sweep
saved before a setting existed; the training settings a sweep owns are refused as flags."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from grpolab.config import CompareConfig, TrainConfig, yaml_text
from grpolab.errors import UserError
from grpolab.sweep.settings import (
    adopt_saved_settings,
    check_sweep_settings,
    primary_declaration,
    refuse_sweep_owned,
    sweep_defaults,
    sweep_train_settings,
)


def _train_a_step(out: Path) -> None:
    (out / "runs" / "sign-G4-seed0").mkdir(parents=True)
    (out / "runs" / "sign-G4-seed0" / "metrics.jsonl").write_text('{"step": 1}\n')


def test_a_sweep_directory_refuses_other_settings(tmp_path: Path) -> None:
    defaults = {**CompareConfig().to_dict(), **TrainConfig().to_dict()}
    settings = {"compare": CompareConfig(seeds=2).to_dict(), "train": TrainConfig(steps=5).to_dict()}
    check_sweep_settings(tmp_path, settings, defaults)  # the first run saves them
    assert yaml.safe_load((tmp_path / "compare.yaml").read_text())["steps"] == 5
    check_sweep_settings(tmp_path, settings, defaults)
    check_sweep_settings(tmp_path, {**settings, "compare": CompareConfig(seeds=2, workers=3).to_dict()}, defaults)
    other = {"compare": CompareConfig(seeds=3).to_dict(), "train": TrainConfig(steps=8).to_dict()}
    check_sweep_settings(tmp_path, other, defaults)  # no run has trained yet: the new settings replace them
    check_sweep_settings(tmp_path, settings, defaults)
    _train_a_step(tmp_path)
    with pytest.raises(UserError, match=r"seeds 2, steps 5; this command gives seeds 3, steps 8"):
        check_sweep_settings(tmp_path, other, defaults)


def test_the_primary_comparison_and_the_gpus_may_change_on_a_trained_sweep(tmp_path: Path) -> None:
    sweep = CompareConfig(estimators="sign,dr_grpo,grpo")
    settings = {"compare": sweep.to_dict(), "train": TrainConfig().to_dict()}
    check_sweep_settings(tmp_path, settings, sweep_defaults())
    _train_a_step(tmp_path)
    later = CompareConfig(estimators="sign,dr_grpo,grpo", primary="grpo,sign", gpus_per_run=1)
    check_sweep_settings(tmp_path, {**settings, "compare": later.to_dict()}, sweep_defaults())
    assert yaml.safe_load((tmp_path / "compare.yaml").read_text())["primary"] == "grpo,sign"  # saved for the report
    with pytest.raises(UserError, match=r"vary ''; this command gives vary 'max_grad_norm=0,1'"):
        check_sweep_settings(tmp_path, {**settings, "compare": dict(later.to_dict(), vary="max_grad_norm=0,1")},
                             sweep_defaults())


def test_the_primary_is_saved_with_when_it_was_declared_and_flagged_when_changed_after_results(
        tmp_path: Path) -> None:
    def settings(primary: str) -> dict:
        return {"compare": CompareConfig(estimators="sign,dr_grpo,grpo", primary=primary).to_dict(),
                "train": TrainConfig().to_dict()}

    first = check_sweep_settings(tmp_path, settings("sign,dr_grpo"), sweep_defaults())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["primary_declared"])
    assert first["primary_declared_after_results"] is False and first["primary_replaced"] == ""
    saved = yaml.safe_load((tmp_path / "compare.yaml").read_text())
    assert {k: saved[k] for k in first} == first  # recorded in compare.yaml
    assert check_sweep_settings(tmp_path, settings("sign,dr_grpo"), sweep_defaults()) == first  # a re-run keeps it
    later = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    before = primary_declaration(tmp_path, "grpo,sign", now=later)  # no run trained yet: a fresh declaration
    assert before == {"primary_declared": "2030-01-02T03:04:05Z", "primary_declared_after_results": False,
                      "primary_replaced": ""}
    _train_a_step(tmp_path)
    assert primary_declaration(tmp_path, "sign,dr_grpo", now=later) == first  # unchanged primary: kept
    changed = check_sweep_settings(tmp_path, settings("grpo,sign"), sweep_defaults())
    assert changed["primary_declared_after_results"] is True and changed["primary_replaced"] == "sign,dr_grpo"
    assert check_sweep_settings(tmp_path, settings("grpo,sign"), sweep_defaults()) == changed  # the flag stays
    back = check_sweep_settings(tmp_path, settings("sign,dr_grpo"), sweep_defaults())
    assert back["primary_declared_after_results"] is True and back["primary_replaced"] == "grpo,sign"


def test_a_sweep_saved_before_the_declaration_was_recorded_says_so(tmp_path: Path) -> None:
    (tmp_path / "compare.yaml").write_text(yaml_text({**CompareConfig(primary="sign,dr_grpo").to_dict(),
                                                      **TrainConfig().to_dict()}))
    _train_a_step(tmp_path)
    assert primary_declaration(tmp_path, "sign,dr_grpo") == {
        "primary_declared": "", "primary_declared_after_results": False, "primary_replaced": ""}


def test_a_sweep_saved_before_lr_bracketing_resumes_without_it(tmp_path: Path) -> None:
    old = {k: v for k, v in CompareConfig().to_dict().items()
           if k not in ("lr_bracket_rounds", "vary", "primary", "gpus_per_run")}
    (tmp_path / "compare.yaml").write_text(yaml_text({**old, **TrainConfig().to_dict()}))
    assert adopt_saved_settings(tmp_path, CompareConfig()) == CompareConfig()  # no run trained: nothing to keep
    _train_a_step(tmp_path)
    adopted = adopt_saved_settings(tmp_path, CompareConfig())
    assert adopted.lr_bracket_rounds == 0
    settings = {"compare": adopted.to_dict(), "train": TrainConfig().to_dict()}
    check_sweep_settings(tmp_path, settings, sweep_defaults())  # accepted as the sweep it was
    assert adopt_saved_settings(tmp_path, CompareConfig(lr_bracket_rounds=3)).lr_bracket_rounds == 3  # explicit
    with pytest.raises(UserError, match="lr_bracket_rounds 0; this command gives lr_bracket_rounds 3"):
        check_sweep_settings(tmp_path, {**settings, "compare": CompareConfig(lr_bracket_rounds=3).to_dict()},
                             sweep_defaults())


def test_settings_a_sweep_owns_are_refused_and_left_out_of_its_shared_settings() -> None:
    refuse_sweep_owned({"steps": 3, "lr": 1e-4})
    with pytest.raises(UserError, match=r"sets group_size, seed for each run itself.*use --group-sizes.*--seeds"):
        refuse_sweep_owned({"group_size": 8, "seed": 1})
    shared = sweep_train_settings(TrainConfig())
    assert "steps" in shared and not {"advantage", "group_size", "seed", "dynamic_sampling"} & set(shared)


def test_primary_is_two_of_the_estimators() -> None:
    assert CompareConfig().primary_pair == ("sign", "dr_grpo")
    assert CompareConfig(estimators="grpo,rloo,sign").primary_pair == ("grpo", "rloo")
    assert CompareConfig(estimators="sign").primary_pair == ()
    assert CompareConfig(primary="rloo, grpo").primary_pair == ("rloo", "grpo")
    for bad in ("sign", "sign,sign", "sign,ppo", "sign,grpo,rloo"):
        with pytest.raises(UserError, match="primary must name two different estimators of --estimators"):
            CompareConfig(primary=bad)
    with pytest.raises(UserError, match="gpus_per_run must be >= 0"):
        CompareConfig(gpus_per_run=-1)
    with pytest.raises(UserError, match="lr_bracket_rounds must be >= 0"):
        CompareConfig(lr_bracket_rounds=-1)


def test_a_damaged_compare_yaml_is_named_in_one_line(tmp_path: Path) -> None:
    settings = {"compare": CompareConfig().to_dict(), "train": TrainConfig().to_dict()}
    check_sweep_settings(tmp_path, settings, sweep_defaults())
    text = (tmp_path / "compare.yaml").read_text()
    assert text.startswith("# grpolab settings") and yaml.safe_load(text)["seeds"] == 5  # plain YAML to a reader
    _train_a_step(tmp_path)
    (tmp_path / "compare.yaml").write_text("".join(text.splitlines(keepends=True)[:20]))  # cut short (full disk)
    with pytest.raises(UserError, match=r"compare\.yaml is cut short"):
        check_sweep_settings(tmp_path, settings, sweep_defaults())
    (tmp_path / "compare.yaml").write_text("")
    with pytest.raises(UserError, match=r"compare\.yaml is empty"):
        check_sweep_settings(tmp_path, settings, sweep_defaults())


@pytest.mark.parametrize("margin", [0.0, -0.1, 1.5, float("nan")])
def test_the_equivalence_margin_is_a_share_of_the_score(margin: float) -> None:
    with pytest.raises(UserError, match="equivalence_margin must lie in"):
        CompareConfig(equivalence_margin=margin)
    assert CompareConfig().equivalence_margin == 0.05


def test_a_declaration_records_the_earlier_results_of_the_same_configuration(tmp_path: Path) -> None:
    train = sweep_train_settings(TrainConfig(steps=7))
    fresh = primary_declaration(tmp_path / "new", "sign,dr_grpo", train=train, roots=[tmp_path])
    assert fresh["primary_earlier_results"] == ""  # nothing of this configuration exists yet
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "compare.yaml").write_text(yaml_text({**CompareConfig().to_dict(), **train}))
    (earlier / "runs.csv").write_text("role,estimator\nresult,sign\n")
    found = primary_declaration(tmp_path / "new", "sign,dr_grpo", train=train, roots=[tmp_path])
    assert found["primary_earlier_results"] == str(earlier)
    out = tmp_path / "kept"
    out.mkdir()
    first = check_sweep_settings(out, {"compare": CompareConfig(primary="sign,dr_grpo").to_dict(), "train": train},
                                 sweep_defaults())
    assert str(earlier) in first["primary_earlier_results"]  # the folder beside it, found through --out's parent
    (earlier / "runs.csv").unlink()  # what was known when it was declared stays recorded
    assert primary_declaration(out, "sign,dr_grpo", train=train, roots=[tmp_path]) == first
