"""The data and a local model are part of a run's identity (issue 35, item 3): a resume, a sweep's resume and
the start-evaluation cache notice a ``--data`` file (or a local model directory) that changed since."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.config import TrainConfig
from grpolab.train.identity import run_identity

ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
FLAGS = ["--task", "file", "--verifier", "exact", "--steps", "2", "--prompts-per-step", "2", "--group-size", "2",
         "--eval-limit", "2", "--eval-samples", "0", "--no-eval-start", "--checkpoint-every", "1", "--threads", "1",
         "--no-progress", "--max-new-tokens", "4"]


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def file_run(tmp_path: Path, capsys) -> tuple[Path, Path]:
    data = _write(tmp_path / "qa.jsonl", ROWS)
    run = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, err = run_cli(["train", "--out", str(run), "--data", str(data), *FLAGS], capsys)
    assert code == 0, err
    return run, data


def test_a_resume_refuses_data_that_changed_since_the_checkpoint(file_run, capsys) -> None:
    run, data = file_run
    state = json.loads((run / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["identity"]["data"] == run_identity(TrainConfig(data=str(data)))["data"]
    stat = data.stat()
    _write(data, [*ROWS[:-1], {"prompt": "9+9=", "answer": "19"}])  # one answer changed, same size
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time
    before = (run / "metrics.jsonl").read_bytes()
    code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "3", "--data", str(data), *FLAGS[:2]],
                        capsys)
    assert_one_line_error(code, err, f"the data {data} changed since", "step-000002", "restore the data")
    assert (run / "metrics.jsonl").read_bytes() == before  # before: resumed, mixing old and new data


def test_a_resume_on_the_same_data_goes_on(file_run, capsys) -> None:
    run, data = file_run
    code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "3", "--data", str(data), *FLAGS[:2],
                         "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err


def test_a_local_model_directory_is_fingerprinted_by_its_files(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"x" * 10)
    first = run_identity(TrainConfig(model=str(model)))["model"]
    assert run_identity(TrainConfig(model=str(model)))["model"] == first
    (model / "model.safetensors").write_bytes(b"y" * 11)  # rewritten: a new size and modification time
    assert run_identity(TrainConfig(model=str(model)))["model"] != first
    assert "model" not in run_identity(TrainConfig(model="embedded"))  # a name, not a local folder


def test_a_data_folder_is_hashed_by_content(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    _write(folder / "train.jsonl", ROWS[:50])
    _write(folder / "test.jsonl", ROWS[50:])
    first = run_identity(TrainConfig(data=str(folder)))["data"]
    shutil.copytree(folder, tmp_path / "copy")
    assert run_identity(TrainConfig(data=str(tmp_path / "copy")))["data"] == first  # content, not place or time
    _write(tmp_path / "copy" / "test.jsonl", ROWS[51:])
    assert run_identity(TrainConfig(data=str(tmp_path / "copy")))["data"] != first


def test_record_resume_refuses_a_task_whose_problems_changed(file_run) -> None:
    """With the task the resume loaded (``record_resume(..., task=)``), problems that differ from those in the
    run's task.json are refused, whatever path they came from (here: the same file, one answer changed)."""
    from grpolab.errors import UserError
    from grpolab.train.lifecycle import load_task_for
    from grpolab.train.settings import load_saved_config, record_resume

    run, data = file_run
    config = load_saved_config(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same = load_task_for(config)
        assert json.loads((run / "task.json").read_text())["data_sha256"] == same.summary()["data_sha256"]
        record_resume(run, config, config, 2, task=same)  # the same problems: recorded
        _write(data, [*ROWS[:-1], {"prompt": "9+9=", "answer": "19"}])
        changed = load_task_for(config)
    with pytest.raises(UserError, match=rf"the problems of task 'file' differ from those {run} trained on"):
        record_resume(run, config, config, 2, task=changed)
    assert len((run / "resumes.jsonl").read_text().splitlines()) == 1


def test_a_resume_refuses_problems_that_differ_from_the_runs_task_json(file_run, capsys) -> None:
    """The engines pass the task they loaded to ``record_resume``: a run whose task.json names other problems (what
    hub data that changed in the cache gives, which no local path shows) is refused before anything is written."""
    run, data = file_run
    summary = json.loads((run / "task.json").read_text())
    (run / "task.json").write_text(json.dumps({**summary, "data_sha256": "0" * 64}))
    code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "3", "--data", str(data), *FLAGS[:2]],
                        capsys)
    assert_one_line_error(code, err, "the problems of task 'file' differ from those", "task.json")


def test_a_trl_engine_resume_refuses_data_that_changed(tmp_path: Path, capsys) -> None:
    """The TRL engine's runs go through the same run shell: its resume refuses changed data too."""
    pytest.importorskip("trl")
    data = _write(tmp_path / "qa.jsonl", ROWS)
    run = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, err = run_cli(["train", "--engine", "trl", "--out", str(run), "--data", str(data), *FLAGS], capsys)
    assert code == 0, err
    state = json.loads((run / "checkpoints" / "checkpoint-2" / "state.json").read_text())
    assert state["identity"]["data"] == run_identity(TrainConfig(data=str(data)))["data"]
    _write(data, [*ROWS[:-1], {"prompt": "9+9=", "answer": "19"}])
    before = (run / "metrics.jsonl").read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, err = run_cli(["train", "--engine", "trl", "--out", str(run), "--resume", "--steps", "3", "--data",
                             str(data), *FLAGS[:2]], capsys)
    assert_one_line_error(code, err, f"the data {data} changed since", "checkpoint-2", "restore the data")
    assert (run / "metrics.jsonl").read_bytes() == before


def test_a_resume_from_another_folder_names_the_path_not_a_change(tmp_path: Path, capsys, monkeypatch) -> None:
    """A run trained on a relative --data path, resumed from another folder: the file is not found from there, which
    the line says, rather than that the data changed."""
    (tmp_path / "data").mkdir()
    _write(tmp_path / "data" / "qa.jsonl", ROWS)
    run = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code, err = run_cli(["train", "--out", str(run), "--data", "data/qa.jsonl", *FLAGS], capsys)
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "3"], capsys)
    assert_one_line_error(code, err, "the data data/qa.jsonl", "is not found from", str(elsewhere),
                          "resume from the folder the run started in")
    assert "changed since" not in err


def test_resume_on_a_folder_without_a_run_says_a_fresh_run_starts(tmp_path: Path, capsys) -> None:
    """--resume is resume-or-start (a preemptible job's script passes it every time), but a mistyped --out must not
    start a fresh run without a word."""
    data = _write(tmp_path / "qa.jsonl", ROWS)
    with pytest.warns(UserWarning, match="holds no saved run") as said:
        code, err = run_cli(["train", "--out", str(tmp_path / "typo"), "--resume", "--data", str(data), *FLAGS],
                            capsys)
    assert code == 0, err
    line = f"--resume: {tmp_path / 'typo'} holds no saved run (no config.yaml), so a fresh run starts there"
    assert line in [str(warning.message) for warning in said]
