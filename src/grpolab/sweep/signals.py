"""Stopping a sweep by signal: Ctrl-C (SIGINT), SIGTERM and SIGHUP all raise ``KeyboardInterrupt`` in the sweep
process while its runs train, so that every one of them stops the whole sweep as Ctrl-C does (a backend ends its
workers before the exception leaves it). Workers are started with SIGINT and SIGHUP blocked
(``blocked_in_children``), so that a Ctrl-C to the terminal's process group or a closed terminal reaches only
the sweep process; SIGTERM stays deliverable to them, since ending a worker sends it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["STOP_SIGNALS", "StopRequest", "blocked_in_children", "stop_signals"]

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_BLOCKED_IN_WORKERS = tuple(s for s in STOP_SIGNALS if s != getattr(signal, "SIGTERM", None))


class StopRequest:
    """What the stop signals' handler records: the first signal received, and whether the stop is under way
    (then further signals are ignored, so that a second Ctrl-C cannot break the stop)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.stopping = False

    def handle(self, signum: int, frame: Any) -> None:
        if self.signal is None:
            self.signal = signum
        if not self.stopping:
            self.stopping = True
            raise KeyboardInterrupt


@contextlib.contextmanager
def stop_signals(request: StopRequest) -> Iterator[None]:
    """Every stop signal raises ``KeyboardInterrupt`` in this (main) thread while the pool runs."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return
    previous = {signum: signal.signal(signum, request.handle) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def blocked_in_children() -> Iterator[None]:
    """Block SIGINT and SIGHUP in this thread while workers start (a child inherits the mask); a signal that
    arrives meanwhile is delivered when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(_BLOCKED_IN_WORKERS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
