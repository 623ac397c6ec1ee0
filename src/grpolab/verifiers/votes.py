"""Vote keys: the answer a completion votes for in majority voting (maj@k), per verifier.

A vote key is the verifier's own extraction of the answer, in a canonical form, so that two completions
vote together when the verifier would read the same answer from both:

* ``gsm8k`` / ``gsm8k_strict``: the extracted numeral as a ``Decimal`` (``3.0`` and ``3`` vote together),
  extracted exactly as the verifier extracts it (strict forms, then the last number for ``gsm8k``);
* ``math``: the last ``\\boxed{}`` content after ``math_answer.normalise`` (the pre-check's normalisation);
  two wrong answers that are equal but spelt apart (``0.5`` and ``\\frac{1}{2}``) vote apart, since checking
  every pair with math-verify would cost a call per pair;
* ``math_final``: its answer (``math_answer.final_answer``), normalised as ``math``'s;
* ``exact``: the whole completion, whitespace-normalised.

None means no answer was found: the completion abstains. A verifier without a row here (a user verifier given
by import path) has no vote keys, and maj@k is not reported for it. Correct completions always vote together
(``grpolab.diagnostics.majority``), so the key only separates the wrong ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from grpolab.verifiers import exact, gsm8k, math_answer
from grpolab.verifiers._text import last_boxed, to_decimal

__all__ = ["VOTE_KEYS", "vote_key_fn"]

VoteKeyFn = Callable[[str], "Hashable | None"]


def _number(numeral: str | None) -> Hashable | None:
    return None if numeral is None else to_decimal(numeral)


def _gsm8k_auto(completion: str) -> Hashable | None:
    found = gsm8k.extract_strict(completion)
    return _number(found if found is not None else gsm8k.extract_flexible(completion))


def _gsm8k_strict(completion: str) -> Hashable | None:
    return _number(gsm8k.extract_strict(completion))


def _math(completion: str) -> Hashable | None:
    boxed = last_boxed(completion)
    answer = None if boxed is None else math_answer.normalise(boxed[0].strip())
    return answer or None


def _math_final(completion: str) -> Hashable | None:
    answer = math_answer.final_answer(completion)
    return (math_answer.normalise(answer) or None) if answer is not None else None


def _exact(completion: str) -> Hashable | None:
    return exact.normalise(completion) or None


VOTE_KEYS: dict[str, VoteKeyFn] = {"gsm8k": _gsm8k_auto, "gsm8k_strict": _gsm8k_strict, "math": _math,
                                   "math_final": _math_final, "exact": _exact}
"""Verifier name -> its vote key."""


def vote_key_fn(verifier: str) -> VoteKeyFn | None:
    """The vote key of ``verifier``, or None when it has none (maj@k is then not reported)."""
    return VOTE_KEYS.get(verifier)
