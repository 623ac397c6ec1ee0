"""report_to with the real packages, for both engines: tiny ``grpolab train`` runs (the embedded model, 2 steps)
with ``--report-to tensorboard,wandb,trackio``, no W&B account, ``WANDB_MODE`` unset and the network refused
(every proxy points at a closed port). What each backend wrote is read back with the backend's own reader and
compared with ``metrics.jsonl``: the same keys, steps and values. ``--tensorboard`` and a saved config with
``tensorboard: true`` still write event files.

A test is skipped only when its package is absent (``pip install -e '.[trackers]'`` installs them all).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grpolab import capabilities
from grpolab.train.runlog import read_metrics

GRPOLAB = [sys.executable, "-m", "grpolab.cli", "train"]
SRC = Path(__file__).resolve().parents[2] / "src"
TINY = ["--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--eval-limit", "2", "--eval-samples", "0",
        "--no-eval-start", "--checkpoint-every", "0", "--threads", "1", "--no-progress", "--max-new-tokens", "12"]
ENGINES = list(capabilities.ENGINES)  # every engine of the table reports to the backends
TIMEOUT = 300  # seconds; a backend waiting on the network would hang the run, and fail here instead
BACKENDS = [name for name in ("tensorboard", "wandb", "trackio") if importlib.util.find_spec(name) is not None]
DEAD_PROXY = "http://127.0.0.1:9"  # nothing listens there: any attempt to reach the network fails at once


def _offline_env(home: Path) -> dict[str, str]:
    """The environment of a run with no W&B account, no ``WANDB_MODE`` and no network; W&B's and Trackio's
    own files go under ``home``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("WANDB_", "TRACKIO_"))}
    proxies = {name: DEAD_PROXY for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                                             "all_proxy")}
    return {**env, **proxies, "NO_PROXY": "", "no_proxy": "", "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "",
            "OMP_NUM_THREADS": "1", "WANDB_CONFIG_DIR": str(home / "wandb-config"),
            "WANDB_CACHE_DIR": str(home / "wandb-cache"), "WANDB_DATA_DIR": str(home / "wandb-data"),
            "TRACKIO_DIR": str(home / "trackio")}


def _train(engine: str, run: Path, flags: list[str]) -> subprocess.CompletedProcess:
    """``grpolab train`` of ``engine`` into ``run`` with ``flags``, in ``run``'s parent as working directory."""
    home = run.parent
    command = [*GRPOLAB, "--engine", engine, *TINY, "--out", str(run), *flags]
    done = subprocess.run(command, cwd=home, env=_offline_env(home), capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module", params=ENGINES)
def reported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of each engine that reported to every installed backend."""
    if not BACKENDS:
        pytest.skip("none of tensorboard, wandb, trackio is installed (pip install -e '.[trackers]')")
    if request.param == "trl":
        pytest.importorskip("trl")
    run = tmp_path_factory.mktemp(f"report-{request.param}") / "run"
    _train(request.param, run, ["--report-to", ",".join(BACKENDS)])
    return run


def _logged(run: Path) -> dict[int, dict[str, float]]:
    """``metrics.jsonl`` of ``run``: step -> the numbers of that step (what the backends are sent)."""
    return {row["step"]: {key: value for key, value in row.items() if key != "step" and _number(value)}
            for row in read_metrics(run / "metrics.jsonl")}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _assert_same(found: dict[int, dict[str, float]], logged: dict[int, dict[str, float]], *, rel: float) -> None:
    """``found`` (backend) holds every step and number of ``logged`` (metrics.jsonl), equal up to ``rel``."""
    assert sorted(found) == sorted(logged) == [1, 2]
    for step, row in logged.items():
        assert {"rollout/reward_mean", "loss/grad_norm", "starvation/useful_fraction"} <= set(row)
        missing = sorted(set(row) - set(found[step]))
        assert not missing, f"step {step}: not in the backend: {missing[:5]}"
        for key, value in row.items():
            assert found[step][key] == pytest.approx(value, rel=rel, abs=1e-12), (step, key)


# ------------------------------------------------------------------------------------------ TensorBoard


def _event_scalars(directory: Path) -> dict[int, dict[str, float]]:
    """Every scalar of the event files in ``directory``, read with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    accumulator.Reload()
    found: dict[int, dict[str, float]] = {}
    for tag in accumulator.Tags()["scalars"]:
        for event in accumulator.Scalars(tag):
            found.setdefault(event.step, {})[tag] = event.value
    return found


def test_tensorboard_event_files_hold_metrics_jsonl(reported: Path) -> None:
    pytest.importorskip("tensorboard")
    assert list((reported / "tensorboard").glob("events.out.tfevents.*"))
    assert not (reported / "checkpoints" / "runs").exists()  # not TRL's own TensorBoard callback
    _assert_same(_event_scalars(reported / "tensorboard"), _logged(reported), rel=1e-6)  # stored as float32


@pytest.mark.parametrize(("engine", "form"), [("grpolab", "--tensorboard"), ("trl", "tensorboard: true")])
def test_the_older_tensorboard_setting_still_writes_event_files(engine: str, form: str, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    if engine == "trl":
        pytest.importorskip("trl")
    if form == "--tensorboard":
        flags = ["--tensorboard"]
    else:  # a config saved before report_to existed
        (tmp_path / "old.yaml").write_text("tensorboard: true\nsteps: 2\n")
        flags = ["--config", str(tmp_path / "old.yaml")]
    run = tmp_path / "run"
    _train(engine, run, flags)
    _assert_same(_event_scalars(run / "tensorboard"), _logged(run), rel=1e-6)


# ------------------------------------------------------------------------------------------------ W&B

_FULL, _LAST = 1, 4  # the record types of W&B's log format (LevelDB's) that end a record
_BLOCK = 32768


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header, then 32 KiB blocks of chunks, each chunk a
    (crc32, length, type) header and its bytes."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    records, pending, position = [], b"", 7
    while position + 7 <= len(data):
        if _BLOCK - position % _BLOCK < 7:  # a block's tail too short for a chunk header is padding
            position += _BLOCK - position % _BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0 and length == 0:
            break
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (_FULL, _LAST):
            records.append(pending)
            pending = b""
    return records


def _wandb_run(run: Path) -> tuple[dict[int, dict[str, float]], dict[str, Any]]:
    """The history (step -> numbers) and the config of the single offline W&B run under ``run/wandb``."""
    from wandb.proto import wandb_internal_pb2

    (folder,) = (run / "wandb").glob("offline-run-*")
    (log,) = folder.glob("run-*.wandb")
    history: dict[int, dict[str, float]] = {}
    config: dict[str, Any] = {}
    for raw in _wandb_records(log):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            values = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                      for item in record.history.item}
            history[values.pop("_step")] = {key: value for key, value in values.items() if not key.startswith("_")}
        elif record.WhichOneof("record_type") == "run":
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
    return history, config


def test_wandb_writes_an_offline_run_under_the_run_directory(reported: Path) -> None:
    pytest.importorskip("wandb")
    history, config = _wandb_run(reported)
    _assert_same(history, _logged(reported), rel=1e-9)
    assert config["report_to"] == ",".join(BACKENDS)  # the run's settings are its W&B config
    assert not (reported.parent / "wandb").exists()  # not in the working directory, as TRL's callback would


# ---------------------------------------------------------------------------------------------- Trackio


def test_trackio_logs_the_run_in_its_own_store(reported: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trackio")
    from trackio import sqlite_storage

    monkeypatch.setattr(sqlite_storage, "TRACKIO_DIR", reported.parent / "trackio")  # the run's TRACKIO_DIR
    assert sqlite_storage.SQLiteStorage.get_runs("grpolab") == [reported.name]
    rows = sqlite_storage.SQLiteStorage.get_logs("grpolab", reported.name)
    found = {row["step"]: {key: value for key, value in row.items() if _number(value)} for row in rows}
    _assert_same(found, _logged(reported), rel=1e-9)
