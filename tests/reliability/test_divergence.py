"""A diverging run stops: ``grpolab train`` ends with one line and exit code 2, keeps its last good
checkpoint, saves no final/ model and writes summary.json with status "diverged"; a NaN model (from before
divergence was detected) is refused in one line by the commands that load it.

The divergence is forced (``_diverge.py``: a NaN weight from the update of step 3), not hoped for from a large
lr: ``--lr 10`` diverged on one CPU and trained on another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tests.reliability._diverge import force_divergence
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.checksums import seal_folder
from grpolab.train import runlog
from grpolab.train.divergence import divergence_reason

LR, AT_STEP = 1e-3, 3  # the run diverges at step 3, whatever the CPU
DIVERGE = {"GRPOLAB_TEST_DIVERGE_LR": str(LR), "GRPOLAB_TEST_DIVERGE_STEP": str(AT_STEP)}
DIVERGING = ["--lr", str(LR), "--steps", "8", "--prompts-per-step", "2", "--eval-limit", "4", "--eval-samples", "0",
             "--no-eval-start", "--checkpoint-every", "1", "--threads", "1", "--no-progress"]


def test_a_diverging_train_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    force_divergence(monkeypatch, LR, AT_STEP)
    run = tmp_path / "run"
    code, err = run_cli(["train", "--out", str(run), *DIVERGING], capsys)
    line = assert_one_line_error(code, err, "diverged at step 3:", "lr 0.001 is likely too high", "a lower --lr")
    assert not (run / "final").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_at_step"] == AT_STEP
    assert summary["reason"] == "the parameters became NaN or infinite after the update" and summary["reason"] in line
    assert [row["step"] for row in runlog.read_metrics(run / "metrics.jsonl")] == [1, 2, 3]
    checkpoints = sorted((run / "checkpoints").glob("step-*"))
    assert [c.name for c in checkpoints] == ["step-000001", "step-000002"]  # the diverged step is never saved
    for checkpoint in checkpoints:
        assert all(torch.isfinite(t).all() for t in load_file(checkpoint / "weights.safetensors").values())


@pytest.mark.parametrize(("metrics", "poison", "words"), [
    ({"loss/total": float("nan"), "loss/grad_norm": 1.0}, None, "loss is nan"),
    ({"loss/total": 0.1, "loss/grad_norm": float("inf")}, None, "gradient norm is inf"),
    ({"loss/total": 0.1, "loss/grad_norm": 1.0}, float("nan"), "parameters"),
    ({"loss/total": 0.1, "loss/grad_norm": 1.0}, float("-inf"), "parameters"),
])
def test_divergence_reason_names_what_is_not_finite(metrics, poison, words):
    params = [torch.zeros(3), torch.ones(2, 2)]
    if poison is not None:
        params[1][0, 1] = poison
    assert words in divergence_reason(metrics, params)


def test_divergence_reason_is_none_for_a_finite_step():
    assert divergence_reason({"loss/total": 0.0, "loss/grad_norm": 0.0}, [torch.full((4,), 1e30)]) is None


def _poison_final(run):
    path = run / "final" / "model.safetensors"
    tensors = load_file(path)
    tensors = {name: torch.full_like(t, float("nan")) for name, t in tensors.items()}
    save_file(tensors, path, metadata={"format": "pt"})
    seal_folder(path.parent)  # as a run that saved NaN weights (before divergence was checked) sealed them


@pytest.mark.parametrize("command", [
    ["gradients", "--prompts", "2", "--group-size", "2", "--threads", "1"],
    ["eval", "--eval-limit", "2", "--eval-samples", "0", "--threads", "1"],
])
def test_a_nan_model_is_refused_in_one_line(finished_run, capsys, command):
    _poison_final(finished_run)
    code, err = run_cli([command[0], "--model", str(finished_run), *command[1:]], capsys)
    assert_one_line_error(code, err, "NaN or infinite weights", str(finished_run / "final"))


def test_gradients_on_a_nan_model_directory_is_one_line(finished_run, capsys):
    _poison_final(finished_run)
    code, err = run_cli(["gradients", "--model", str(finished_run / "final"), "--prompts", "2", "--group-size", "2",
                         "--threads", "1"], capsys)
    assert_one_line_error(code, err, f"the model {finished_run / 'final'} has NaN or infinite weights")


def test_the_real_cli_of_a_diverging_run_prints_one_line_and_exits_non_zero(tmp_path):
    run = tmp_path / "run"
    wrapper = str(Path(__file__).parent / "_diverge.py")
    done = subprocess.run([sys.executable, wrapper, "train", "--out", str(run), *DIVERGING], capture_output=True,
                          text=True, timeout=600, check=False, env={**os.environ, **DIVERGE})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "diverged at step 3:" in lines[0], lines
    assert not (run / "final").exists()
