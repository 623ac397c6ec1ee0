"""Client side of the math-verify servers (``_worker``): a pool of warm server processes.

Each calling thread borrows an idle server (starting one when none is idle), so concurrent callers never
wait for each other; a server is a plain ``subprocess.Popen`` (allowed inside daemonic multiprocessing
workers, unlike ``multiprocessing.Process``) in its own session, so Ctrl-C in a terminal does not reach it.
The pool is a per-process cache, like a connection pool: a forked child forgets its parent's servers and
starts its own, and servers exit when their stdin closes (at interpreter exit or when the parent dies).
Stopping a server (or killing one that overran) also kills every process left in its session: the
checker child and whatever a user verifier started, so no verifier's process outlives its server.

Cost: starting a server (a Python interpreter importing sympy and math-verify) takes about a second, once
per process and thread-concurrency level; call :func:`warm_up` to pay it ahead of time. That start-up is
not counted against the per-call time limit. POSIX only (``select`` on pipes, ``fork`` in the server).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from grpolab.errors import UserError

DEFAULT_TIME_LIMIT_S = 1.0
"""The hard per-call limit of a verifier call in a worker (math answers and user verifiers alike)."""

STARTUP_TIMEOUT_S = 120.0
"""How long to wait for a new server to import math-verify before giving up."""

GRACE_S = 0.4
"""Extra time over the check's limit allowed for the round trip before the server itself is killed."""


class _Server:
    """One ``_worker`` process and its pipes; ``target``: the user verifier it serves (None: math)."""

    def __init__(self, target: str | None = None) -> None:
        self.target = target
        src = str(Path(__file__).resolve().parents[2])
        # a user verifier is found on this process's sys.path (which may have been extended at run time)
        paths = [src, *([p or os.getcwd() for p in sys.path] if target else []), os.environ.get("PYTHONPATH")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grpolab.verifiers._worker", *([target] if target else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.buffer = b""
        if self._read_line(time.monotonic() + STARTUP_TIMEOUT_S) != b"ready":
            self.close()
            if target:
                raise UserError(
                    f"the worker process of verifier {target!r} did not start; check that "
                    f"`python -c 'import {target.partition(':')[0]}'` works in a fresh interpreter"
                )
            raise UserError(
                "the math-verify worker process did not start; check that `python -c 'import math_verify'` "
                "works in this environment (pip install 'math-verify[antlr4_13_2]')"
            )

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the server's stdout, or None at the deadline or end of file."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def ask(self, gold: str, pred: str, limit: float) -> dict | None:
        """The server's reply to one check, or None if it did not answer in ``limit + GRACE_S``."""
        assert self.proc.stdin is not None
        request = json.dumps({"gold": gold, "pred": pred, "limit": limit}).encode() + b"\n"
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except OSError:
            return None
        line = self._read_line(time.monotonic() + limit + GRACE_S)
        return None if line is None else json.loads(line)

    def close(self) -> None:
        """Stop the server (closing stdin lets it exit; kill it if it does not), then what is left of its session."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the server and every process of its session (its checker and what a verifier started)."""
        _kill_session(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def exit_description(self) -> str | None:
        """How the server ended (``killed by SIGKILL``, ``exit code 1``), or None while it runs."""
        code = self.proc.poll()
        if code is None:
            return None
        return f"killed by {_signal_name(-code)}" if code < 0 else f"exit code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _session_members(session: int) -> list[int]:
    """The processes of ``session`` (Linux: read from /proc; elsewhere only its leader's process group)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # state ppid pgrp session ...
        except OSError:  # the process exited meanwhile
            continue
        if len(fields) > 3 and int(fields[3]) == session:
            members.append(int(stat.parent.name))
    return members


def _kill_session(session: int) -> None:
    """SIGKILL every process of ``session`` (a server's, started with ``start_new_session``) and its group."""
    for pid in _session_members(session):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    try:
        os.killpg(session, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_lock = threading.Lock()
_idle: list[_Server] = []


def _acquire(target: str | None = None) -> _Server:
    with _lock:
        for index in range(len(_idle) - 1, -1, -1):
            if _idle[index].target == target:
                return _idle.pop(index)
    return _Server(target)


def _release(server: _Server) -> None:
    with _lock:
        _idle.append(server)


def check(gold: str, pred: str, limit: float, target: str | None = None) -> dict:
    """Check ``pred`` against ``gold`` with math-verify (or the user verifier ``target``, called as
    ``target(pred, gold)``) in a warm server, within ``limit + GRACE_S`` s.

    Returns the server's reply ``{"score", "timed_out", "reason"}`` (user verifiers: plus ``error``); a
    server that overran is killed and the reply is a timed-out 0.0; a verifier process that died is
    ``{"score": None, "reason": "crashed", "error": "killed by SIGSEGV"}`` (or the exit code).
    """
    server = _acquire(target)
    reply = server.ask(gold, pred, limit)
    if reply is None:
        ended = server.exit_description()
        server.kill()
        if ended is not None:
            return {"score": None, "timed_out": False, "reason": "crashed", "error": f"{ended} (verifier server)"}
        return {"score": 0.0, "timed_out": True, "reason": "server_timeout"}
    _release(server)
    return reply


def warm_up(servers: int = 1) -> None:
    """Make sure at least ``servers`` servers are idle, so that the next checks do not pay the start-up."""
    with _lock:
        missing = servers - len(_idle)
    started = [_Server() for _ in range(missing)]
    for server in started:
        _release(server)


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's servers (their pipes belong to the parent)."""
    global _lock, _idle
    _lock, _idle = threading.Lock(), []


def _close_all() -> None:
    with _lock:
        servers, _idle[:] = list(_idle), []
    for server in servers:
        server.close()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_close_all)
