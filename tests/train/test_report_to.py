"""report_to: metrics to TensorBoard, W&B (offline, files under the run directory) and Trackio, as TRL names
them; ``--tensorboard`` and saved configs with ``tensorboard: true`` keep working; a missing package or a
contradictory list is one line before the run starts."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from grpolab.cli import main
from grpolab.config import TrainConfig, save_config
from grpolab.errors import UserError
from grpolab.train.ownership import check_fresh_run_dir
from grpolab.train.runlog import report_backends, trl_report_to, wandb_mode

TINY = ["--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--eval-limit", "2", "--eval-samples", "0",
        "--no-eval-start", "--checkpoint-every", "0", "--threads", "1", "--no-progress"]

FAKE_WANDB = '''
import json, os
from pathlib import Path

class _Run:
    def __init__(self, settings):
        self.folder = Path(settings["dir"]) / "wandb" / ("offline-run-" + settings["id"])
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "init.json").write_text(json.dumps(settings, default=str))

    def log(self, data, step):
        with (self.folder / "history.jsonl").open("a") as handle:
            handle.write(json.dumps({"step": step, **data}) + "\\n")

    def finish(self):
        (self.folder / "finished").write_text("")

def init(**settings):
    return _Run(settings)
'''


def _config(**changes) -> TrainConfig:
    return TrainConfig(**changes)


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, []),
    ({"report_to": "none"}, []),
    ({"report_to": "wandb, tensorboard"}, ["wandb", "tensorboard"]),
    ({"report_to": "trackio,trackio"}, ["trackio"]),
    ({"tensorboard": True}, ["tensorboard"]),  # a saved config with tensorboard: true (report_to: none)
    ({"tensorboard": True, "report_to": "wandb"}, ["tensorboard", "wandb"]),
])
def test_backends_of_a_config(changes: dict, expected: list[str]) -> None:
    config = _config(**changes)
    assert report_backends(config) == expected
    assert trl_report_to(config) == (expected or ["none"])


@pytest.mark.parametrize(("report_to", "message"), [
    ("none,wandb", r"^report_to 'none,wandb' says none and also wandb; drop none, or drop the backends$"),
    ("mlflow", r"^report_to: unknown backend 'mlflow'; use a comma-separated list of tensorboard, wandb, trackio"),
    ("wandb,", r"unknown backend ''"),
])
def test_contradictory_or_unknown_backends_are_refused(report_to: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        _config(report_to=report_to)


def test_wandb_is_offline_without_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def _train(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    code = main(["train", *TINY, *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("flags", "package"), [
    (["--report-to", "tensorboard"], "tensorboard"), (["--tensorboard"], "tensorboard"),
    (["--report-to", "wandb"], "wandb"), (["--report-to", "trackio"], "trackio"),
    (["--engine", "trl", "--report-to", "wandb"], "wandb"),  # the TRL engine opens grpolab's backends too
])
def test_a_backend_without_its_package_is_one_line_before_the_run(flags: list[str], package: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if "trl" in flags:
        pytest.importorskip("trl")
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed: find_spec None, import fails
    assert importlib.util.find_spec(package) is None
    code, err = _train(["--out", str(tmp_path / "run"), *flags], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"needs the {package} package: pip install {package}" in lines[0], err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


# The real packages' files, for both engines: test_report_to_backends.py


def test_a_run_directory_holding_wandb_files_is_still_grpolab_s(tmp_path: Path) -> None:
    """``<run>/wandb`` is written by report_to: a restart of the same run is not refused over it, and
    ``--overwrite`` removes it with the rest of the run's files."""
    run = tmp_path / "run"
    (run / "wandb" / "offline-run-1-grpolab-x").mkdir(parents=True)
    config = _config(report_to="wandb")
    save_config(config, run / "config.yaml")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    check_fresh_run_dir(run, overwrite=False, config=config)  # this very run, restarting
    with pytest.raises(UserError, match="holds the logs of an earlier run"):
        check_fresh_run_dir(run, overwrite=False, config=_config(report_to="wandb", seed=1))
    check_fresh_run_dir(run, overwrite=True, config=_config(report_to="wandb", seed=1))
    assert not (run / "wandb").exists() and not (run / "metrics.jsonl").exists()


def _fake_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the stand-in ``wandb`` (FAKE_WANDB) first on the import path."""
    (tmp_path / "fake" / "wandb").mkdir(parents=True)
    (tmp_path / "fake" / "wandb" / "__init__.py").write_text(FAKE_WANDB)
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)


def test_wandb_runs_offline_under_the_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("wandb") is None:  # a stand-in records what grpolab asks of wandb
        _fake_wandb(tmp_path, monkeypatch)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    code, err = _train(["--out", str(run), "--report-to", "wandb"], capsys)
    assert code == 0, err
    folders = list((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 1, list((run / "wandb").iterdir())
    if (folders[0] / "init.json").exists():  # the stand-in: check what was asked, and what was logged
        settings = json.loads((folders[0] / "init.json").read_text())
        assert settings["mode"] == "offline" and settings["dir"] == str(run) and settings["name"] == "run"
        assert settings["config"]["report_to"] == "wandb"
        history = [json.loads(line) for line in (folders[0] / "history.jsonl").read_text().splitlines()]
        assert [row["step"] for row in history] == [1, 2] and "rollout/reward_mean" in history[0]
        assert (folders[0] / "finished").exists()


def test_a_resumed_run_may_add_a_backend(tmp_path: Path, capsys: pytest.CaptureFixture,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_wandb(tmp_path, monkeypatch)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = tmp_path / "run"
    code, err = _train(["--out", str(run), "--steps", "1"], capsys)
    assert code == 0, err
    code, err = _train(["--out", str(run), "--steps", "2", "--resume", "--report-to", "wandb"], capsys)
    assert code == 0, err
    (folder,) = (run / "wandb").glob("offline-run-*")
    history = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in history] == [2]  # only the steps run after the resume
