"""Warnings raised in a sweep's runs reach the sweep process in the runs' outcomes and are shown there as its own:
each distinct one once per sweep, one line on the command line (printed by the workers they were two lines with a
source path, once per run)."""

from __future__ import annotations

import concurrent.futures
import sys
import warnings
from pathlib import Path

import pytest

from grpolab.cli import _one_line_warning
from grpolab.config import TrainConfig
from grpolab.sweep import local
from grpolab.sweep.plan import plan_runs
from grpolab.sweep.worker import run_one, show_worker_warnings

pytestmark = pytest.mark.fast


class LibraryWarning(UserWarning):
    """A library's own category, which the sweep process need not be able to import."""


def _specs(tmp_path: Path, seeds: int) -> list:
    return plan_runs(TrainConfig(steps=1, device="cpu"), ["sign"], list(range(seeds)), [2], tmp_path)


def test_a_runs_warnings_travel_in_its_outcome(tmp_path: Path, monkeypatch) -> None:
    import grpolab.train.engines as engines

    def train(config, run_dir, **kwargs):
        for _ in range(3):
            warnings.warn("`past_key_values` is deprecated;\n  use `cache`", FutureWarning, stacklevel=1)
        warnings.warn("a library's note", LibraryWarning, stacklevel=1)
        if config.seed == 1:
            raise RuntimeError("broken")

    monkeypatch.setattr(engines, "train", train)
    ok, failed = (run_one(spec) for spec in _specs(tmp_path, 2))
    expected = [("FutureWarning", "`past_key_values` is deprecated; use `cache`"),
                ("LibraryWarning", "a library's note")]
    assert ok["ok"] and ok["warnings"] == expected
    assert not failed["ok"] and failed["error"] == "RuntimeError: broken" and failed["warnings"] == expected


def test_the_sweep_shows_each_distinct_worker_warning_once_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    # was: every worker printed "path/to/module.py:123: FutureWarning: ..." and the source line, once per run
    specs = _specs(tmp_path, 4)
    said = [("FutureWarning", "`gradient_checkpointing` is deprecated"), ("LibraryWarning", "a library's note")]
    monkeypatch.setattr(local, "worker_pool", lambda workers, progress, devices:
                        concurrent.futures.ThreadPoolExecutor(workers))
    monkeypatch.setattr(local, "post_progress", lambda spec: {"run_id": spec.run_id, "ok": True,
                                                              "warnings": list(said)})
    finished: list[dict] = []
    one_line = _one_line_warning("compare")  # how grpolab.cli prints a warning
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # Python's default action: each distinct warning once
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
            one_line(message, category, filename, lineno, line))
        local.run_local(specs, 2, lambda event: finished.append(event.get("finished")), gpus_per_run=0)
    err = capsys.readouterr().err
    assert err.splitlines() == ["grpolab compare: warning: `gradient_checkpointing` is deprecated",
                                "grpolab compare: warning: a library's note"], err
    assert len([f for f in finished if f]) == 4 and all("warnings" not in f for f in finished if f)


def test_worker_warnings_follow_the_sweep_process_filters() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning)
        for _ in range(2):
            show_worker_warnings({"warnings": [("FutureWarning", "hidden"), ("LibraryWarning", "shown"),
                                               ("RuntimeWarning", "overflow")]})
    assert [(w.category, str(w.message)) for w in caught] == [(UserWarning, "shown"), (RuntimeWarning, "overflow")] * 2


def test_a_runs_write_error_tells_how_a_sweep_resumes(tmp_path: Path, monkeypatch) -> None:
    """A full disk in a sweep's run said "rerun with --resume", a flag grpolab compare does not have."""
    import errno

    import grpolab.train.engines as engines
    from grpolab.io import RESUME, write_error

    def train(config, run_dir, **kwargs):
        raise write_error(run_dir / "metrics.jsonl", OSError(errno.ENOSPC, "No space left on device"), then=RESUME)

    monkeypatch.setattr(engines, "train", train)
    (failed,) = (run_one(spec) for spec in _specs(tmp_path, 1))
    assert "disk full); free disk space, then rerun the same grpolab compare command" in failed["error"]
    assert "--resume" not in failed["error"]
