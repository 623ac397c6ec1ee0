"""User verifiers (dotted import paths) under the same hard time limit as the built-in math verifier.

A user verifier runs in a warm worker process (the math verifier's ``_pool`` / ``_worker``) that
imported it once and forks a child for the calls. Each call gets ``_pool.DEFAULT_TIME_LIMIT_S``
(1 s; the answer comes within about 1.4 s). A call that overruns has its child killed and replaced and
raises ``VerifierTimeout`` here; a call that raises or returns something that is not a number raises
``VerifierError``; a call whose process died (a segfault, ``os._exit``) raises ``VerifierCrash`` naming
the signal or exit code. ``rewards.score_batch`` scores either completion None (unscorable, so advantage 0) and
counts it in ``rollout/verifier_timeouts`` or ``rollout/verifier_errors`` (the first time-out with a
``RuntimeWarning``); the run goes on unless the verifier fails on most of a step's completions
(``rewards.check_scores``).

Departures: the verifier runs in another process, so it sees its module's state as imported, not state
set in the training process at run time; what it prints goes to stderr. Cost: starting the worker (a
Python interpreter importing the verifier's module) once per process, then a pipe round trip per call.
"""

from __future__ import annotations

from collections.abc import Callable

from grpolab.verifiers import _pool

__all__ = ["TimeLimitedVerifier", "VerifierCrash", "VerifierError", "VerifierTimeout"]


class VerifierError(RuntimeError):
    """A user verifier raised, or returned something that is not a number (the message says which)."""


class VerifierTimeout(VerifierError):
    """A user verifier did not return within its time limit (the message names the verifier and the limit)."""


class VerifierCrash(VerifierError):
    """The process running a user verifier died during a call (the message names the signal or exit code)."""


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
            raise VerifierTimeout(f"verifier {self.path!r} did not return within {self.limit_s:g} s")
        if reply.get("reason") == "crashed":
            raise VerifierCrash(f"verifier {self.path!r} crashed ({reply['error']})")
        if "error" in reply:
            raise VerifierError(reply["error"])
        return reply["score"]

    def __repr__(self) -> str:
        return f"TimeLimitedVerifier({self.path!r}, limit_s={self.limit_s:g})"
