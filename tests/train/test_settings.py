"""Settings that are applied as given: config files, the task a config builds, saved run and sweep settings,
and the directory lock (no training here; the end-to-end cases are in tests/reliability and tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from grpolab import experiments
from grpolab.config import CompareConfig, TrainConfig, build_config, load_config_file, save_config
from grpolab.errors import UserError
from grpolab.train.lock import DirectoryLock
from grpolab.train.run import load_task_for
from grpolab.train.settings import check_sweep_settings, resume_config


def test_yaml_and_toml_read_numbers_alike(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("lr: 1e-5\nweight_decay: 1\nmax_grad_norm: 2E+1\nseed: 3\nverifier: 1e5x\n")
    (tmp_path / "a.toml").write_text("lr = 1e-5\nweight_decay = 1\nmax_grad_norm = 2E+1\nseed = 3\nverifier = '1e5x'\n")
    from_yaml, from_toml = (build_config(load_config_file(tmp_path / name)) for name in ("a.yaml", "a.toml"))
    assert from_yaml == from_toml
    assert from_yaml.lr == 1e-5 and isinstance(from_yaml.weight_decay, float) and from_yaml.verifier == "1e5x"
    save_config(from_yaml, tmp_path / "config.yaml")  # what is saved reads back as what ran
    assert build_config(load_config_file(tmp_path / "config.yaml")) == from_yaml
    number_like = from_yaml.replace(verifier="1e5")  # a string that reads as a number when unquoted
    save_config(number_like, tmp_path / "config.yaml")
    assert build_config(load_config_file(tmp_path / "config.yaml")) == number_like


def test_task_limit_applies_to_the_generated_task() -> None:
    task = load_task_for(TrainConfig(task="arith", task_limit=10))
    assert len(task.train) == 10 and len(task.test) == 10


def test_the_math500_split_follows_the_seed(tmp_path: Path) -> None:
    rows = [{"problem": f"What is {i}+1?", "answer": str(i + 1), "unique_id": f"p{i}"} for i in range(20)]
    data = tmp_path / "math500.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tests = {seed: {p.id for p in load_task_for(TrainConfig(task="math500", data=str(data), seed=seed)).test}
             for seed in (0, 1)}
    assert len(tests[0]) == len(tests[1]) == 4 and tests[0] != tests[1]
    pinned = TrainConfig(task="math500", data=str(data), seed=1, task_options={"seed": 0})
    assert {p.id for p in load_task_for(pinned).test} == tests[0]  # a seed in task_options pins the cut


def test_resume_config_keeps_the_saved_settings(tmp_path: Path) -> None:
    assert resume_config(tmp_path, {"lr": 1.0}) is None  # nothing saved: nothing to resume
    save_config(TrainConfig(advantage="dr_grpo", lr=3e-4, steps=30, threads=1), tmp_path / "config.yaml")
    config = resume_config(tmp_path, {"lr": 3e-4, "steps": 50, "threads": 2})
    assert (config.advantage, config.lr, config.steps, config.threads) == ("dr_grpo", 3e-4, 50, 2)
    with pytest.raises(UserError, match=r"group_size 4; this command gives group_size 8"):
        resume_config(tmp_path, {"group_size": 8})


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
    (tmp_path / "runs" / "sign-G4-seed0").mkdir(parents=True)
    (tmp_path / "runs" / "sign-G4-seed0" / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(UserError, match=r"seeds 2, steps 5; this command gives seeds 3, steps 8"):
        check_sweep_settings(tmp_path, other, defaults)


def _fake_finished_run(spec: experiments.RunSpec, config: TrainConfig) -> None:
    spec.run_dir.mkdir(parents=True)
    save_config(config, spec.run_dir / "config.yaml")
    (spec.run_dir / "summary.json").write_text('{"status": "complete"}')
    row = {"step": config.steps, "phase": "end", "greedy_accuracy": 0.5, "pass_at_k": {}, "successes": []}
    (spec.run_dir / "eval.jsonl").write_text(json.dumps(row) + "\n")


def test_a_run_saved_with_other_settings_is_not_a_result(tmp_path: Path) -> None:
    specs = experiments.plan_runs(TrainConfig(steps=8), ["sign", "rloo"], [0], [2], tmp_path)
    _fake_finished_run(specs[0], specs[0].config)
    _fake_finished_run(specs[1], specs[1].config.replace(steps=5))
    results, _ = experiments.collect_results(specs)
    assert list(results["run_id"]) == [specs[0].run_id]
    assert specs[0].finished and not specs[1].finished  # so the sweep tries it again, and reports the refusal


def test_the_directory_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    first = DirectoryLock(tmp_path, "grpolab train").acquire()
    with pytest.raises(UserError, match=r"in use by another grpolab process \(pid \d+, grpolab train"):
        DirectoryLock(tmp_path, "grpolab compare").acquire()
    first.release()
    with DirectoryLock(tmp_path, "grpolab compare") as second:
        assert second.held
    assert not second.held
