"""GSM8K verifier: the completion's final number against the reference's ``#### N``.

Reference: the number after the last ``####`` (a full GSM8K solution), or, with no ``####``, a text that
holds exactly one number (what ``grpolab.tasks.gsm8k`` stores, e.g. ``"18"``). Anything else is
unparseable and scores None.

Completion, two modes (Cobbe et al. 2021; lm-eval-harness ``tasks/gsm8k/gsm8k.yaml`` filters):

- ``strict``: the last of ``#### N``, ``\\boxed{N}`` and "the answer is N" (also "answer: N").
  lm-eval's strict-match only accepts ``#### N``; we also take the boxed and "answer is" forms, which
  instruction-tuned models write far more often, so that a correct answer is not scored 0 for its format.
- ``flexible``: the last number anywhere in the text (lm-eval's flexible-extract regex
  ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, last match).
- ``auto`` (the default, registry name ``gsm8k``): strict, falling back to flexible when no strict form
  is present. Registry name ``gsm8k_strict`` is strict only.

Departures from lm-eval-harness: numbers are compared as decimals, not as strings after regex clean-up, so
``$1,234.50`` equals ``1234.5`` and ``3.0`` equals ``3``; ``$``, units and a trailing period are ignored
because only the numeral is matched; thousands commas must be grouped in threes; a minus counts only when
it does not follow a letter or digit (``16-3`` is not ``-3``); the Unicode minus counts as ``-``. Digits
are ASCII only: a completion that writes its answer in Arabic-Indic or fullwidth digits scores 0. Only
the last 8 kB of a completion are searched.

The reward is binary: 1.0 or 0.0; None only when the reference itself has no parseable number.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Literal

from grpolab.verifiers._registry import register_details
from grpolab.verifiers._text import NUMBER, NUMBER_RE, last_boxed, normalise_minus, numbers, tail, to_decimal

Mode = Literal["auto", "strict", "flexible"]

_HASHES_RE = re.compile(rf"####\s*\$?\s*({NUMBER})", re.ASCII)
_ANSWER_IS_RE = re.compile(rf"answer\s*(?:is|:|=)\s*:?\s*\\?\$?\s*({NUMBER})", re.ASCII | re.IGNORECASE)
_UNITS_RE = re.compile(r"\\text\{[^{}]*\}|\\mathrm\{[^{}]*\}|\\[$%,!; ]")


def reference_number(reference: str) -> Decimal | None:
    """The number a GSM8K reference stands for: after the last ``####``, else its only number."""
    text = normalise_minus(tail(reference))
    if "####" in text:
        found = numbers(text.rpartition("####")[2])
        return to_decimal(found[0]) if found else None
    found = numbers(text)
    return to_decimal(found[0]) if len(found) == 1 else None


def _boxed_number(text: str) -> tuple[str, int] | None:
    """The number inside the last ``\\boxed{}`` when the box holds exactly one number."""
    boxed = last_boxed(text)
    if boxed is None:
        return None
    found = numbers(_UNITS_RE.sub(" ", boxed[0]))
    return (found[0], boxed[1]) if len(found) == 1 else None


def _strict_candidates(text: str) -> list[tuple[int, str, int]]:
    """(where the form starts, numeral, where the numeral starts) of the last match of each strict form."""
    candidates: list[tuple[int, str, int]] = []
    for pattern in (_HASHES_RE, _ANSWER_IS_RE):
        last = None
        for last in pattern.finditer(text):  # noqa: B007 - only the last match is wanted
            pass
        if last is not None:
            candidates.append((last.start(), last.group(1), last.start(1)))
    boxed = _boxed_number(text)
    if boxed is not None:  # the box's one numeral is a literal substring of the box (units become spaces)
        candidates.append((boxed[1], boxed[0], text.find(boxed[0], boxed[1])))
    return candidates


def extract_strict(completion: str) -> str | None:
    """The last strict-form answer (``#### N``, ``\\boxed{N}``, "the answer is N"), or None."""
    candidates = _strict_candidates(normalise_minus(tail(completion)))
    return max(candidates)[1] if candidates else None


def locate_answer(completion: str, *, mode: Mode = "auto") -> tuple[str, int] | None:
    """The numeral ``score_details`` extracts in ``mode`` and its start index in ``completion``, or None."""
    text = normalise_minus(tail(completion))
    offset = len(completion) - len(text)
    candidates = _strict_candidates(text) if mode in ("auto", "strict") else []
    if candidates:
        _, numeral, start = max(candidates)
        return (numeral, offset + start) if start >= 0 else None
    if mode == "strict":
        return None
    last = None
    for last in NUMBER_RE.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    return None if last is None else (last.group(), offset + last.start())


def extract_flexible(completion: str) -> str | None:
    """The last number in the completion, or None."""
    found = numbers(tail(completion))
    return found[-1] if found else None


def score_details(completion: str, reference: str, *, mode: Mode = "auto") -> tuple[float | None, dict]:
    """GSM8K reward (1.0 / 0.0; None if the reference is unparseable) and its parts for logging.

    Parts: ``extracted`` (the completion's numeral or None), ``mode`` (``strict``/``flexible``/None: which
    extraction found it), ``reference`` (the reference number as a string, or None).
    """
    target = reference_number(reference)
    parts: dict = {"extracted": None, "mode": None, "reference": None if target is None else str(target)}
    if target is None:
        return None, parts
    answer = extract_strict(completion) if mode in ("auto", "strict") else None
    if answer is not None:
        parts["mode"] = "strict"
    elif mode in ("auto", "flexible"):
        answer = extract_flexible(completion)
        parts["mode"] = None if answer is None else "flexible"
    parts["extracted"] = answer
    value = None if answer is None else to_decimal(answer)
    return (1.0 if value is not None and value == target else 0.0), parts


def score(completion: str, reference: str, *, mode: Mode = "auto") -> float | None:
    """GSM8K reward: 1.0 if the completion's answer equals the reference number, else 0.0 (see module)."""
    return score_details(completion, reference, mode=mode)[0]


def _strict_details(completion: str, reference: str) -> tuple[float | None, dict]:
    return score_details(completion, reference, mode="strict")


def _auto_details(completion: str, reference: str) -> tuple[float | None, dict]:
    return score_details(completion, reference, mode="auto")


register_details("gsm8k", _auto_details)
register_details("gsm8k_strict", _strict_details)
