"""Offline fail-fast: a model or data set name that is neither local nor reachable fails at once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpolab.errors import UserError
from grpolab.hub import hub_cached, hub_unavailable


@pytest.fixture
def online_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return monkeypatch


def test_offline_variable_is_honoured(online_env: pytest.MonkeyPatch) -> None:
    online_env.setenv("HF_HUB_OFFLINE", "1")
    assert hub_unavailable() == "HF_HUB_OFFLINE is set"
    from grpolab.models import load_policy

    with pytest.raises(UserError, match=r"'org/nonexistent' .*not in the Hugging Face cache.*HF_HUB_OFFLINE is set"):
        load_policy("org/nonexistent")


def test_unreachable_endpoint_fails_at_once(online_env: pytest.MonkeyPatch) -> None:
    online_env.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: connection refused
    assert "http://127.0.0.1:9 cannot be reached" in (hub_unavailable() or "")
    from grpolab.tasks._loading import hub_split

    with pytest.raises(UserError, match=r"data set 'org/none' is not in the local cache.*cannot be reached"):
        hub_split("org/none", None, "train", ["question"])


def test_cached_repositories_are_found(online_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert not hub_cached("org/model")
    (tmp_path / "hub" / "models--org--model" / "snapshots" / "abc123").mkdir(parents=True)
    assert hub_cached("org/model") and not hub_cached("org/model", "dataset")


def _train_cli(args: list[str], tmp_path: Path, env_extra: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HUB_CACHE=str(tmp_path / "hub"), HF_DATASETS_CACHE=str(tmp_path / "datasets"), **env_extra)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grpolab.cli", "train", *args, "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=120)
    return done, time.monotonic() - started


@pytest.mark.parametrize("env_extra", [{"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}],
                         ids=["offline-variable", "unreachable"])
def test_file_task_with_an_uncached_hub_name_fails_fast_naming_local_files(tmp_path: Path,
                                                                             env_extra: dict[str, str]) -> None:
    # this used to wait for the hub's retries (28 s) before failing
    done, seconds = _train_cli(["--task", "file", "--data", "org/not-cached", "--steps", "0", "--no-progress"],
                               tmp_path, env_extra)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "'org/not-cached' is not in the local cache" in lines[0]
    assert "pass a local .jsonl, .csv or .parquet file" in lines[0]
    assert seconds < 120  # the imports take most of it (20 s on a loaded machine); the hub's retries took 28 s more


@pytest.mark.parametrize("variable", [("HF_HUB_OFFLINE", "1"), ("HF_ENDPOINT", "http://127.0.0.1:9")])
def test_reading_an_uncached_hub_table_offline_fails_in_seconds(online_env: pytest.MonkeyPatch, tmp_path: Path,
                                                                 variable: tuple[str, str]) -> None:
    import datasets

    from grpolab.tasks._tables import read_table

    online_env.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    online_env.setenv(*variable)
    started = time.monotonic()
    with pytest.raises(UserError, match=r"'org/not-cached' is not in the local cache and the hub cannot be used"):
        read_table("org/not-cached")
    assert time.monotonic() - started < 5
