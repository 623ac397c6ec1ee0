"""Runs an export refuses, each in one line naming the run, before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from export.conftest import copy_run
from grpolab.checksums import seal_folder
from grpolab.cli import main
from grpolab.errors import UserError
from grpolab.export import export
from grpolab.export.source import read_run

pytestmark = pytest.mark.fast


def _refused(run_dir: Path, tmp_path: Path, match: str, **kwargs) -> str:
    """The one line ``export`` refuses ``run_dir`` with; it names the run and nothing was written."""
    with pytest.raises(UserError, match=match) as refusal:
        export(run_dir, tmp_path / "out", **kwargs)
    message = str(refusal.value)
    assert str(run_dir) in message and "\n" not in message
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.export-*"))
    return message


def test_a_diverged_run_is_refused(full_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(full_run, tmp_path / "runs")
    summary = {"status": "diverged", "diverged_at_step": 2, "reason": "the loss is nan", "steps": 2}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    _refused(run_dir, tmp_path, "diverged at step 2 \\(the loss is nan\\)")
    _refused(run_dir, tmp_path, "diverged", step=1)  # its checkpoints too


def test_an_unfinished_run_is_refused_but_its_checkpoints_export(full_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(full_run, tmp_path / "runs")
    (run_dir / "summary.json").unlink()
    message = _refused(run_dir, tmp_path, "is unfinished")
    assert "--step N (it keeps checkpoints of step(s) 1, 2)" in message
    source = read_run(run_dir, step=1)
    assert (source.step, source.checkpoint, source.finished) == (1, run_dir / "checkpoints" / "step-000001", False)
    export(run_dir, tmp_path / "checkpoint", step=1)
    assert "had not finished" in (tmp_path / "checkpoint" / "README.md").read_text()


def _evaluations_lost(run: Path) -> None:
    """eval.jsonl torn in the middle, and a summary.json that holds no evaluations to restore it from."""
    (run / "eval.jsonl").write_text('{"step": 0, "phase": "start"}\nnot json\n{"step": 2, "phase": "end"}\n')
    (run / "summary.json").write_text(json.dumps({"status": "finished", "steps": 2}))


@pytest.mark.parametrize(("damage", "match"), [
    (lambda run: (run / "config.yaml").write_text("steps: [\n"), "is damaged: "),
    (lambda run: (run / "config.yaml").unlink(), "holds no config.yaml"),
    (lambda run: (run / "summary.json").write_text("{"), "is damaged: its summary.json cannot be read"),
    (lambda run: shutil.rmtree(run / "final"), "has no final/ model"),
    (lambda run: (run / "final" / "model.safetensors").write_bytes(b"cut short"), "final model .* is damaged"),
    (_evaluations_lost, "eval.jsonl is damaged at line 2"),
], ids=["config", "no-config", "summary", "no-final", "weights", "eval-log"])
def test_a_damaged_run_is_refused(damage, match: str, full_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(full_run, tmp_path / "runs")
    damage(run_dir)
    _refused(run_dir, tmp_path, match)


def test_nan_weights_are_refused(full_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(full_run, tmp_path / "runs")
    path = run_dir / "final" / "model.safetensors"
    weights = load_file(str(path))
    first = sorted(weights)[0]
    weights[first] = torch.full_like(weights[first], float("nan"))
    save_file(weights, str(path), metadata={"format": "pt"})
    seal_folder(path.parent)  # saved so by a run that diverged unnoticed: its seal matches
    _refused(run_dir, tmp_path, "NaN or infinite weights")


def test_a_missing_or_damaged_checkpoint_is_refused(lora_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(lora_run, tmp_path / "runs")
    _refused(run_dir, tmp_path, "has no checkpoint of step 7; it keeps checkpoints of step\\(s\\) 1, 2", step=7)
    weights = run_dir / "checkpoints" / "step-000001" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    _refused(run_dir, tmp_path, "its checkpoint step-000001 does not match its checksums", step=1)


def test_the_command_refuses_in_one_line_naming_the_run(full_run: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = copy_run(full_run, tmp_path / "runs")
    (run_dir / "summary.json").unlink()
    assert main(["export", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"grpolab export: error: run {run_dir} is unfinished") and err.count("\n") == 1


def test_a_run_a_budget_ended_early_exports_as_of_its_last_step(full_run: Path, tmp_path: Path) -> None:
    run_dir = copy_run(full_run, tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert read_run(run_dir).step == summary["steps"] == 2
    summary["evaluations"] = [{**row, "step": 1} if row["phase"] == "end" else row for row in summary["evaluations"]]
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert read_run(run_dir).step == 1


def test_a_run_folder_named_like_a_model_preset_exports_its_own_weights(full_run: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    copy = copy_run(full_run, tmp_path / "runs")
    copy.rename(tmp_path / "embedded")
    monkeypatch.chdir(tmp_path)
    export("embedded", "out")
    trained, exported = load_file(str(full_run / "final" / "model.safetensors")), load_file("out/model.safetensors")
    assert all(torch.equal(trained[name], exported[name]) for name in trained)
