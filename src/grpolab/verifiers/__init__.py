"""Verifiers: binary rewards from a completion and a reference answer, registered by name.

Public API::

    score(name, completion, reference) -> float | None          # None: cannot be scored
    score_with_details(name, completion, reference) -> (float | None, dict)   # parts for logging
    get_verifier(name_or_dotted_path) -> fn(completion, reference) -> float | None
    available() -> list[str]
    register(name)                                               # decorator; duplicates -> ValueError

Built-in verifiers (each returns only 0.0, 1.0 or None, never raises on any text, and returns within
2 s; see the modules for the details and the departures from common practice):

- ``gsm8k``: strict ``#### N`` / ``\\boxed{N}`` / "the answer is N", else the last number (flexible);
- ``gsm8k_strict``: the strict forms only;
- ``math``: last ``\\boxed{...}`` checked with math-verify under a hard per-call time limit;
- ``exact``: whole completion equals the reference after whitespace normalisation (the arithmetic task).
"""

from __future__ import annotations

from grpolab.verifiers import exact, gsm8k, math_answer
from grpolab.verifiers._registry import (
    DetailsFn,
    VerifierFn,
    available,
    get_verifier,
    is_import_path,
    register,
    score,
    score_with_details,
)
from grpolab.verifiers._user import VerifierTimeout

__all__ = [
    "DetailsFn",
    "VerifierFn",
    "VerifierTimeout",
    "available",
    "exact",
    "get_verifier",
    "gsm8k",
    "is_import_path",
    "math_answer",
    "register",
    "score",
    "score_with_details",
]
