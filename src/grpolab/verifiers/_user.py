"""User verifiers (dotted import paths) under the same hard time limit as the built-in math verifier.

A user verifier runs in a warm worker process (the math verifier's ``_pool`` / ``_worker``) that
imported it once and forks a child for the calls. Each call gets ``_pool.DEFAULT_TIME_LIMIT_S``
(1 s; the answer comes within about 1.4 s). A call that overruns has its child killed and replaced: the
completion is scored None (unscorable, so advantage 0) with a ``RuntimeWarning``, and the run goes on. A
call that raises or returns something that is not a number raises ``VerifierError`` here, which
``rewards.score_batch`` counts in ``rollout/verifier_errors``.

Departures: the verifier runs in another process, so it sees its module's state as imported, not state
set in the training process at run time; what it prints goes to stderr. Cost: starting the worker (a
Python interpreter importing the verifier's module) once per process, then a pipe round trip per call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from grpolab.verifiers import _pool

__all__ = ["TimeLimitedVerifier", "VerifierError"]


class VerifierError(RuntimeError):
    """A user verifier raised, or returned something that is not a number (the message says which)."""


class TimeLimitedVerifier:
    """``fn(completion, reference) -> float | None`` for the user verifier at ``path``, run in a worker
    process under a hard per-call time limit of ``limit_s`` seconds."""

    def __init__(self, path: str, fn: Callable, limit_s: float | None = None) -> None:
        self.path = path
        self.limit_s = _pool.DEFAULT_TIME_LIMIT_S if limit_s is None else float(limit_s)
        self.__name__ = getattr(fn, "__name__", path)
        self.__doc__ = fn.__doc__

    def __call__(self, completion: str, reference: str) -> float | None:
        reply = _pool.check(reference, completion, self.limit_s, target=self.path)
        if reply.get("timed_out"):
            warnings.warn(
                f"verifier {self.path!r} did not return within {self.limit_s:g} s; the completion is scored "
                "None (unscorable) and the run goes on",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        if "error" in reply:
            raise VerifierError(reply["error"])
        return reply["score"]

    def __repr__(self) -> str:
        return f"TimeLimitedVerifier({self.path!r}, limit_s={self.limit_s:g})"
