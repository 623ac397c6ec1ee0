"""A user verifier's process: a crash is reported as a crash (with the signal or exit code), not as a
time-out, and nothing a verifier starts outlives the worker that ran it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from grpolab import verifiers
from grpolab.rewards import score_batch
from grpolab.verifiers import _pool
from grpolab.verifiers._user import VerifierCrash, VerifierTimeout

CRASHING = """
import os, signal

def check(completion, reference):
    if completion == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if completion == "exit":
        os._exit(3)
    return float(completion == reference)
"""

FORKING = """
import os, subprocess, sys, time
from pathlib import Path

def spawn(completion, reference):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(reference).write_text(str(child.pid))
    if completion == "hang":
        time.sleep(3600)
    return 1.0
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and waiting to be reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _gone_soon(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "crashy.py").write_text(CRASHING)
    (tmp_path / "forky.py").write_text(FORKING)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("completion", "how"), [("segv", "killed by SIGSEGV"), ("exit", "exit code 3")])
def test_a_crashing_verifier_is_reported_as_a_crash_with_its_signal(module_dir: Path, completion: str,
                                                                     how: str) -> None:
    verifier = verifiers.get_verifier("crashy:check")
    assert verifier("7", "7") == 1.0  # starts the worker
    started = time.monotonic()
    with pytest.raises(VerifierCrash, match=rf"^verifier 'crashy:check' crashed \({how}\)$"):
        verifier(completion, "7")
    assert time.monotonic() - started < 0.9  # reported when it happens, not after the 1 s limit
    assert verifier("7", "7") == 1.0  # the dead checker was replaced


def test_a_crash_counts_as_a_verifier_error_not_a_timeout(module_dir: Path) -> None:
    scores = score_batch(verifiers.get_verifier("crashy:check"), ["7", "segv", "8"], ["7", "7", "7"])
    assert scores.rewards[[0, 2]].tolist() == [1.0, 0.0] and np.isnan(scores.rewards[1])
    assert (scores.errors, scores.timeouts) == (1, 0)
    assert scores.first_error == "VerifierCrash: verifier 'crashy:check' crashed (killed by SIGSEGV)"


def test_no_process_a_verifier_started_survives_the_worker(module_dir: Path) -> None:
    pid_file = module_dir / "grandchild.pid"
    assert verifiers.get_verifier("forky:spawn")("ok", str(pid_file)) == 1.0
    grandchild = int(pid_file.read_text())
    assert _alive(grandchild)
    _pool._close_all()  # what happens at interpreter exit
    assert _gone_soon(grandchild)


def test_no_process_a_verifier_started_survives_its_replaced_checker(module_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pool, "DEFAULT_TIME_LIMIT_S", 0.3)
    verifier = verifiers.get_verifier("forky:spawn")
    pid_file = module_dir / "grandchild.pid"
    with pytest.raises(VerifierTimeout):
        verifier("hang", str(pid_file))
    assert _gone_soon(int(pid_file.read_text()))
    assert verifier("ok", str(module_dir / "next.pid")) == 1.0  # the worker goes on with a fresh checker
