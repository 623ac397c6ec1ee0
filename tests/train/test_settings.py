"""Settings that are applied as given: config files, the task a config builds, saved run settings,
and the directory lock (no training here; the end-to-end cases are in tests/reliability and tests/e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpolab.config import TrainConfig, build_config, load_config_file, save_config
from grpolab.errors import UserError
from grpolab.train.lifecycle import load_task_for
from grpolab.train.lock import DirectoryLock
from grpolab.train.settings import resume_config

pytestmark = pytest.mark.fast


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


def test_resume_takes_another_spelling_of_the_saved_data_path(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A job script that writes --data ./d.jsonl, or its absolute path, resumes the run saved with d.jsonl, which
    keeps its saved spelling; another file is refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "e.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "run").mkdir()
    save_config(TrainConfig(task="file", data="d.jsonl"), tmp_path / "run" / "config.yaml")
    for spelling in ("./d.jsonl", str(tmp_path / "d.jsonl"), "sub/../d.jsonl"):
        assert resume_config(tmp_path / "run", {"data": spelling}).data == "d.jsonl"
    with pytest.raises(UserError, match=r"data 'd.jsonl'; this command gives data 'e.jsonl'"):
        resume_config(tmp_path / "run", {"data": "e.jsonl"})
    (tmp_path / "d.jsonl").unlink()  # gone: nothing says the two name one file
    with pytest.raises(UserError, match=r"this command gives data './d.jsonl'"):
        resume_config(tmp_path / "run", {"data": "./d.jsonl"})


def test_the_directory_lock_refuses_a_second_holder(tmp_path: Path) -> None:
    first = DirectoryLock(tmp_path, "grpolab train").acquire()
    with pytest.raises(UserError, match=r"in use by another grpolab process \(pid \d+, grpolab train"):
        DirectoryLock(tmp_path, "grpolab compare").acquire()
    first.release()
    with DirectoryLock(tmp_path, "grpolab compare") as second:
        assert second.held
    assert not second.held
