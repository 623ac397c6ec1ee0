"""The math-verify server process: ``python -m grpolab.verifiers._worker`` (started by ``_pool``).

Why a separate process: math-verify's own time-outs use ``signal.alarm``, which works only in the main
thread, takes whole seconds, and cannot interrupt a long C-level operation (sympy evaluating
``10^{10^{10}}`` spends minutes inside one big-integer power). This server is single-threaded and has
math-verify and its parser caches loaded; it forks a child that does the checks. A check that overruns its
time limit gets the child killed (SIGKILL interrupts anything) and a fresh child forked from this
already-warm process in milliseconds, so the caller gets its answer on time from any thread or process.

Protocol: one JSON object per line. Request ``{"gold": str, "pred": str, "limit": float}``; reply
``{"score": 1.0 | 0.0 | null, "timed_out": bool, "reason": str}``. The server prints ``ready`` once warm
and exits when its stdin closes.

``python -m grpolab.verifiers._worker package.module:function`` serves a user verifier the same way,
under the same hard time limit: the child calls ``function(pred, gold)`` (completion, reference) and
replies with its value as a float (NaN and inf included) or null, or ``{"error": "Type: message"}`` when
the call raised or returned something that is not a number.

A child that dies during a call (a segfault, ``os._exit``, a kill) is reported at once, not as a
time-out: the reply is ``{"score": null, "reason": "crashed", "error": "killed by SIGSEGV"}`` (or
``"exit code 3"``) and a fresh child is forked. Each child leads its own process group, and stopping or
replacing it kills the whole group, so processes a verifier starts do not outlive it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any


def check(gold: str, pred: str) -> dict:
    """math-verify equivalence of two bare LaTeX answers (no time limit: the caller kills on overrun)."""
    from math_verify import parse, verify

    gold_parsed = parse("\\boxed{" + gold + "}", parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed:
        return {"score": None, "timed_out": False, "reason": "reference_unparsed"}
    pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=None)  # type: ignore[arg-type]
    if not pred_parsed:
        return {"score": 0.0, "timed_out": False, "reason": "answer_unparsed"}
    equal = verify(gold_parsed, pred_parsed, timeout_seconds=None)
    return {"score": 1.0 if equal else 0.0, "timed_out": False, "reason": "math_verify"}


def _user_check(fn: Callable[[str, str], Any]) -> Callable[[str, str], dict]:
    """The check of a user verifier ``fn(completion, reference)``: its value as a float or None."""

    def check_user(gold: str, pred: str) -> dict:
        try:
            value = fn(pred, gold)
            value = None if value is None else float(value)  # a str, list or huge int fails here
        except BaseException as exc:  # the parent counts it as a verifier error
            return {"score": None, "timed_out": False, "reason": "error", "error": f"{type(exc).__name__}: {exc}"}
        return {"score": value, "timed_out": False, "reason": "user"}

    return check_user


def _load(target: str) -> Callable[[str, str], Any]:
    """Import ``package.module:function`` (or ``package.module.function``)."""
    module, sep, attr = target.partition(":")
    if not sep:
        module, _, attr = target.rpartition(".")
    return getattr(importlib.import_module(module), attr)


_check: Callable[[str, str], dict] = check


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies (best effort elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child_loop(sock: socket.socket) -> None:
    """In the forked child: answer requests from the socket until it closes."""
    _die_with_parent()
    stream = sock.makefile("rwb")
    for line in stream:
        request = json.loads(line)
        try:
            reply = _check(request["gold"], request["pred"])
        except BaseException as exc:  # any failure of the checker is a 0 reward
            reply = {"score": 0.0, "timed_out": False, "reason": f"error: {type(exc).__name__}"}
        stream.write(json.dumps(reply).encode() + b"\n")
        stream.flush()
    os._exit(0)


def exit_description(status: int) -> str:
    """How a process ended, from its ``waitpid`` status: ``killed by SIGSEGV`` or ``exit code 3``."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"wait status {status}"


class _Child:
    """A forked checker process (the leader of its own process group) and the socket to it."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            ours.close()
            try:
                os.setpgid(0, 0)
                _child_loop(theirs)
            finally:
                os._exit(1)
        theirs.close()
        try:
            os.setpgid(pid, pid)  # also here, so the group exists before any request is sent
        except OSError:  # the child did it first (or has already exited)
            pass
        self.pid, self.sock, self.buffer, self.status = pid, ours, b"", None

    def ask(self, line: bytes, limit: float) -> bytes | None:
        """Send one request line; the reply line, a crash reply if the child died, or None if no reply came
        within ``limit`` seconds."""
        try:
            self.sock.sendall(line)
        except OSError:
            return self._crash_reply()
        deadline = time.monotonic() + limit
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.sock], [], [], remaining)[0]:
                return None
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return self._crash_reply()
            self.buffer += chunk
        reply, _, self.buffer = self.buffer.partition(b"\n")
        return reply + b"\n"

    @property
    def dead(self) -> bool:
        return self.status is not None

    def _crash_reply(self) -> bytes:
        """The reply for a child that closed its socket mid-call: it died; say how."""
        self.status = self._reap(deadline=time.monotonic() + 1.0)
        reply = {"score": None, "timed_out": False, "reason": "crashed", "error": exit_description(self.status)}
        return json.dumps(reply).encode() + b"\n"

    def _reap(self, deadline: float) -> int:
        """The child's wait status, killing its group if it has not exited by ``deadline``."""
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return status
            time.sleep(0.005)
        self._kill_group()
        return os.waitpid(self.pid, 0)[1]

    def _kill_group(self) -> None:
        for kill, target in ((os.killpg, self.pid), (os.kill, self.pid)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue

    def kill(self) -> None:
        """SIGKILL the child and every process in its group (what the verifier started), and reap it."""
        self._kill_group()
        if self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]
        self.sock.close()


def _serve(child: _Child, out: Any) -> _Child:
    """Answer stdin requests on ``out`` until stdin closes or the parent stops reading; returns the live child."""
    for line in sys.stdin.buffer:
        reply = child.ask(line, float(json.loads(line)["limit"]))
        try:
            out.write(reply or b'{"score": 0.0, "timed_out": true, "reason": "timeout"}\n')
            out.flush()
        except BrokenPipeError:  # the parent is gone
            break
        if reply is None or child.dead:  # replace an overrunning or dead child after answering
            child.kill()
            child = _Child()
    return child


def main() -> None:
    """Warm up, fork the first child, serve until stdin closes."""
    global _check
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    out = os.fdopen(os.dup(1), "wb")  # the replies; anything a verifier prints goes to stderr instead
    os.dup2(2, 1)
    if len(sys.argv) > 1:  # a user verifier, imported once before forking
        _check = _user_check(_load(sys.argv[1]))
    else:
        logging.getLogger("math_verify").setLevel(logging.CRITICAL)
        # Import and warm math-verify and sympy's lazily built parts before forking, so every child is warm.
        check("\\frac{1}{2}", "0.5")
        check("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi}{4} \\right]", "[\\pi^2/8, 5\\pi/4]")
    child = _Child()
    try:
        out.write(b"ready\n")
        out.flush()
    except BrokenPipeError:  # the parent is gone
        child.kill()
        os._exit(0)
    _serve(child, out).kill()
    os._exit(0)  # skip flushing a stdout nobody reads


if __name__ == "__main__":
    main()
