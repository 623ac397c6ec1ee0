"""A full disk while a run writes its checkpoint or final/ model ends the run with one line (never the
25-line ``SafetensorError`` traceback) and leaves no temporary folder behind; the last complete checkpoint
is kept, so ``--resume`` continues once there is space. Tried with a real 2 MB tmpfs where mounting is
possible, and everywhere with a fault-injection shim whose write fails as safetensors' does."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from safetensors import SafetensorError
from tests.reliability.conftest import RUN_FLAGS, assert_one_line_error, run_cli

from grpolab.train import checkpoint as checkpoint_module
from grpolab.train import runlog

DISK_FULL = ('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on '
             'device" })')


def _leftovers(run):
    return sorted(str(p.relative_to(run)) for p in run.rglob("*tmp*"))


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "full"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                              check=False)
    except OSError as error:
        pytest.skip(f"cannot mount a tmpfs here ({error})")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_real_full_disk_during_the_first_checkpoint_is_one_line(small_disk, capsys):
    run = small_disk / "run"
    code, err = run_cli(["train", "--out", str(run), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "disk full", "free disk space")
    assert _leftovers(run) == []
    assert not list((run / "checkpoints").glob("step-*"))


def _failing_after(calls_before_failure: int, real):
    calls = {"n": 0}

    def save_file(tensors, path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > calls_before_failure:
            with open(path, "wb") as handle:  # half a file, as a write cut off by a full disk leaves
                handle.write(b"\0" * 100)
            raise SafetensorError(DISK_FULL)
        return real(tensors, path, *args, **kwargs)

    return save_file


def test_disk_full_in_a_later_checkpoint_keeps_the_earlier_one_and_resumes(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setattr(checkpoint_module, "save_file", _failing_after(2, checkpoint_module.save_file))
    code, err = run_cli(["train", "--out", str(run), *RUN_FLAGS], capsys)
    line = assert_one_line_error(code, err, "step-000002", "disk full", "--resume")
    assert "SafetensorError" not in line
    assert _leftovers(run) == []
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000001"]
    assert not (run / "final").exists() and not (run / "summary.json").exists()
    monkeypatch.undo()
    code, err = run_cli(["train", "--out", str(run), "--resume", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    assert [row["step"] for row in runlog.read_metrics(run / "metrics.jsonl")] == [1, 2]


def test_disk_full_while_saving_the_final_model_is_one_line_with_no_half_final(tmp_path, capsys, monkeypatch):
    import transformers

    def full(self, directory, *args, **kwargs):
        (Path(directory) / "model.safetensors").write_bytes(b"\0" * 10)
        raise SafetensorError(DISK_FULL)

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full)
    run = tmp_path / f"run-{uuid.uuid4().hex[:6]}"
    code, err = run_cli(["train", "--out", str(run), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, str(run / "final"), "disk full", "--resume")
    assert not (run / "final").exists() and not (run / "summary.json").exists()
    assert _leftovers(run) == []
    monkeypatch.undo()  # space again: the resume has no step left to train and writes final/ and summary.json
    code, err = run_cli(["train", "--out", str(run), "--resume", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    summary = json.loads((run / "summary.json").read_text())
    last = runlog.read_metrics(run / "metrics.jsonl")[-1]
    assert summary["status"] == "finished" and summary["final_metrics"]["loss/lr"] == last["loss/lr"]
    assert summary["final_metrics"] == {k: v for k, v in last.items() if k != "step"}
    assert (run / "final" / "model.safetensors").stat().st_size > 1000


def test_disk_full_while_writing_a_report_keeps_the_old_report_and_is_one_line(tmp_path, monkeypatch):
    import errno
    import os

    from grpolab.errors import UserError
    from grpolab.report import write_report
    from report_sweeps import synthetic_sweep

    results, metrics, config = synthetic_sweep(("sign", "grpo"), seeds=2, sizes=(2,))
    html, _ = write_report(tmp_path, results, metrics, config)
    before = html.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UserError) as caught:
        write_report(tmp_path, results, metrics, config)
    assert "disk full" in str(caught.value) and "\n" not in str(caught.value)
    assert html.read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_disk_full_in_the_metrics_log_names_the_fault_and_the_resume_and_frees_the_lock(tmp_path, monkeypatch):
    """Was: the log's own close, failing again in the run's ``finally``, replaced the one-line error with a bare
    ``OSError`` (no file, no --resume) and left the run directory locked."""
    import errno
    import os

    from grpolab.config import TrainConfig
    from grpolab.errors import UserError
    from grpolab.train.lock import DirectoryLock
    from grpolab.train.trainer import Trainer

    real_write, rows = runlog.MetricsLog.write, []

    def write(self, step, metrics, **kwargs):
        rows.append(step)
        if step == 2:
            self._handle.close = lambda: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        return real_write(self, step, metrics, **kwargs)

    monkeypatch.setattr(runlog.MetricsLog, "write", write)
    config = TrainConfig(steps=3, prompts_per_step=2, group_size=2, eval_start=False, eval_samples=0, eval_limit=2,
                         threads=1)
    with pytest.raises(UserError) as caught:
        Trainer(config, tmp_path / "run").run()
    line = str(caught.value)
    assert "metrics.jsonl (disk full); free disk space, then rerun with --resume" in line and "\n" not in line
    assert rows == [1, 2]
    DirectoryLock(tmp_path / "run", "grpolab train").acquire().release()  # given up: a resume may take the folder


def test_disk_full_in_a_rollout_or_eval_log_names_that_file(tmp_path, monkeypatch):
    """A full disk in pyarrow's writer or in an append's fsync raises an OSError with no file name; the one line
    named the run folder. Now it names the file the disk stopped."""
    import errno
    import os

    import pyarrow.parquet as pq

    from grpolab.config import TrainConfig
    from grpolab.errors import UserError
    from grpolab.train import lifecycle
    from grpolab.train.trainer import Trainer

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # as pyarrow's and os.fsync's: no filename

    config = TrainConfig(steps=2, prompts_per_step=2, group_size=2, eval_start=False, eval_samples=0, eval_limit=2,
                         threads=1)
    monkeypatch.setattr(pq, "write_table", full)
    with pytest.raises(UserError) as caught:
        Trainer(config, tmp_path / "run").run()
    line = str(caught.value)
    assert f"cannot write {tmp_path / 'run' / 'rollouts' / 'step-000001.parquet'} (disk full)" in line, line
    monkeypatch.undo()

    real_fsync = os.fsync
    monkeypatch.setattr(lifecycle.os, "fsync", full)
    with pytest.raises(OSError) as raised:
        lifecycle.append_evaluation(tmp_path, {"step": 0})
    assert raised.value.filename == str(tmp_path / "eval.jsonl")
    monkeypatch.setattr(lifecycle.os, "fsync", real_fsync)

    log = runlog.MetricsLog(tmp_path / "metrics.jsonl")
    monkeypatch.setattr(runlog.os, "fsync", full)
    with pytest.raises(OSError) as raised:
        log.write(1, {"loss": 0.5})
    assert raised.value.filename == str(tmp_path / "metrics.jsonl")
