"""The ``device`` setting as a user meets it on a machine without a GPU: a GPU asked for is refused in one line
by every command that computes, a bad name is refused, and a run records where it trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grpolab import devices
from grpolab.cli import main
from grpolab.config import TrainConfig
from grpolab.errors import UserError

pytestmark = pytest.mark.fast

TINY = ["--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-limit", "2", "--eval-samples", "0",
        "--no-eval-start", "--checkpoint-every", "0", "--threads", "1", "--no-progress"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch sees no GPU")


def _one_line(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@no_gpu
@pytest.mark.parametrize("command", [
    ["train", *TINY],
    ["train", "--engine", "trl", *TINY],
    ["eval", "--limit", "2", "--n", "0"],
    ["gradients", "--prompts", "2", "--group-size", "2"],
])
def test_a_gpu_that_is_not_there_is_one_line_naming_the_fix(command: list[str], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    out = ["--out", str(tmp_path / "run")] if command[0] == "train" else []
    line = _one_line([*command, *out, "--device", "cuda"], capsys)
    assert "torch sees no CUDA GPU" in line and "use --device cpu or --device auto" in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # nothing trained


@no_gpu
def test_mechanism_refuses_a_missing_gpu_before_reading_the_runs(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    line = _one_line(["mechanism", str(tmp_path / "no-such-sweep"), "--device", "cuda:1"], capsys)
    assert "torch sees no CUDA GPU" in line, line


def test_a_device_name_that_means_nothing_is_refused_with_the_choices(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    line = _one_line(["train", *TINY, "--out", str(tmp_path / "run"), "--device", "gpu"], capsys)
    assert "device must be auto, cpu, cuda or cuda:N, got 'gpu'" in line, line
    with pytest.raises(UserError, match="device must be"):
        TrainConfig(device="cuda:x")


def test_auto_is_the_cpu_without_a_gpu_and_cpu_is_always_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert devices.resolve("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.resolve("auto") == torch.device("cuda", 0)
    assert devices.resolve("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(UserError, match=r"sees 2 CUDA GPU\(s\), cuda:0 to cuda:1"):
        devices.resolve("cuda:2")


def test_a_run_records_its_device_setting_and_the_device_it_trained_on(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert main(["train", *TINY, "--out", str(run), "--device", "cpu"]) == 0
    assert "device: cpu" in (run / "config.yaml").read_text().splitlines()
    assert json.loads((run / "summary.json").read_text())["device"] == "cpu"
    out = capsys.readouterr().out
    assert f"run directory: {run} (trained on cpu)" in out.splitlines(), out  # one line, however long the path
