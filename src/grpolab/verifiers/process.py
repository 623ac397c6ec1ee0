"""Process verifiers: per-character rewards of a completion (the step labels of per-token training).

A process verifier is ``fn(completion, reference) -> CharRewards | None`` (None: the reference cannot be
scored, as for the outcome verifier). ``CharRewards`` holds pairs (position, reward): position is an index
into the completion, or ``len(completion)`` for "the end of the text"; reward is 0.0 or 1.0. Characters
without a pair are unrewarded (they are not steps). ``grpolab.process_rewards`` turns these into per-token
rewards.

Built in, one for each outcome verifier that has an answer made of characters to compare:

- ``exact`` (tasks ``reverse`` and plain ``arith``): the answer is the whitespace-normalised completion, as
  the ``exact`` verifier reads it; answer character i scores 1 iff it equals reference character i.
- ``gsm8k`` / ``gsm8k_strict``: the answer is the numeral the outcome verifier extracts; its characters
  (digits, ``-`` and ``.``; thousands commas are skipped) score by position against the reference number
  written plainly (``format(value.normalize(), "f")``: ``1,234.50`` -> ``1234.5``), left-aligned. A numeral
  whose value equals the reference (``3.0`` for ``3``) scores 1 on every character, so an answer the outcome
  verifier calls correct is correct at every step.

Common rules: answer characters past the reference's length score 0; each reference character the answer
lacks adds a 0 at the position just after the answer (the token that ended it); no answer at all gives one 0
per reference character at the end of the text. So the outcome reward is 1 exactly when there is at least one
pair and every pair is 1 (tested). At most ``MAX_EXTRA_CHARS`` characters past the reference are scored, so a
megabyte of junk costs no more than a short completion.

Departure from the papers: DeepSeekMath's process supervision (Shao et al. 2024, arXiv 2402.03300, §4.1.3)
scores reasoning *steps* with a learned process reward model; here a step is a character of the final
answer and its label is computed exactly from the reference (a verifiable process reward), so only tasks
whose answers can be compared character by character have one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal

from grpolab.errors import UserError
from grpolab.verifiers import gsm8k
from grpolab.verifiers._text import to_decimal
from grpolab.verifiers.exact import normalise

__all__ = ["MAX_EXTRA_CHARS", "CharRewards", "available", "exact_chars", "get_process_verifier", "gsm8k_chars"]

CharRewards = list[tuple[int, float]]
"""(position in the completion, or len(completion) for its end; reward 0.0 or 1.0) pairs."""

ProcessVerifierFn = Callable[[str, str], "CharRewards | None"]

MAX_EXTRA_CHARS = 256
"""Answer characters scored past the reference's length (each 0); the rest are unrewarded."""

_WORD_RE = re.compile(r"\S+")


def _score_answer(answer: list[tuple[int, str]], target: str, end: int) -> CharRewards:
    """Positional rewards of ``answer`` ((position, char) pairs, in order) against ``target``; a missing
    reference character scores 0 at ``end``."""
    pairs = [(pos, 1.0 if k < len(target) and char == target[k] else 0.0) for k, (pos, char) in enumerate(answer)]
    return pairs + [(end, 0.0)] * max(len(target) - len(answer), 0)


def _normalised_chars(completion: str, limit: int) -> list[tuple[int, str]]:
    """The first ``limit`` characters of ``normalise(completion)`` with their positions in ``completion``
    (a collapsed whitespace run sits at its first character)."""
    chars: list[tuple[int, str]] = []
    for word in _WORD_RE.finditer(completion):
        if chars:
            chars.append((chars[-1][0] + 1, " "))
        chars.extend((word.start() + i, c) for i, c in enumerate(word.group()[: limit - len(chars)]))
        if len(chars) >= limit:
            break
    return chars[:limit]


def exact_chars(completion: str, reference: str) -> CharRewards | None:
    """Per-character rewards of the ``exact`` verifier's answer (see the module docstring)."""
    target = normalise(reference)
    if not target:
        return None
    answer = _normalised_chars(completion, len(target) + MAX_EXTRA_CHARS)
    end = answer[-1][0] + 1 if answer else len(completion)
    return _score_answer(answer, target, end)


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _gsm8k(completion: str, reference: str, mode: gsm8k.Mode) -> CharRewards | None:
    target = gsm8k.reference_number(reference)
    if target is None:
        return None
    expected = _plain(target)[: 4 * MAX_EXTRA_CHARS]
    found = gsm8k.locate_answer(completion, mode=mode)
    if found is None:
        return [(len(completion), 0.0)] * len(expected)
    numeral, start = found
    answer = [(start + i, c) for i, c in enumerate(numeral) if c != ","][: len(expected) + MAX_EXTRA_CHARS]
    if to_decimal(numeral) == target:
        return [(pos, 1.0) for pos, _ in answer]
    return _score_answer(answer, expected, start + len(numeral))


def gsm8k_chars(completion: str, reference: str) -> CharRewards | None:
    """Per-character rewards of the numeral the ``gsm8k`` verifier extracts (see the module docstring)."""
    return _gsm8k(completion, reference, "auto")


def _gsm8k_strict_chars(completion: str, reference: str) -> CharRewards | None:
    return _gsm8k(completion, reference, "strict")


_PROCESS: dict[str, ProcessVerifierFn] = {"exact": exact_chars, "gsm8k": gsm8k_chars,
                                          "gsm8k_strict": _gsm8k_strict_chars}


def available() -> list[str]:
    """The outcome verifiers that have a process version."""
    return sorted(_PROCESS)


def get_process_verifier(verifier: str) -> ProcessVerifierFn:
    """The process version of outcome verifier ``verifier``; ``UserError`` naming the supported ones if none."""
    if verifier not in _PROCESS:
        raise UserError(f"per-token rewards need a verifier with a process version ({', '.join(available())}), "
                        f"got {verifier!r}; use --reward-granularity outcome or another --verifier")
    return _PROCESS[verifier]
