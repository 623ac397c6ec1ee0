"""Exact-match verifier: the whole completion equals the reference after whitespace normalisation.

Normalisation strips both ends and collapses every internal run of whitespace to one space; nothing else
(case, punctuation and trailing text all count). This is deliberately stricter than answer *extraction*:
it is the verifier of the embedded arithmetic task, whose completions are short and whose generation
stops at a newline, so trailing junk after the answer is a real error, not a formatting quirk. Use
``gsm8k`` or ``math`` when the answer sits inside free-form reasoning.

Returns 1.0 or 0.0; None when the reference is empty after normalisation (nothing to compare with).
"""

from __future__ import annotations

from grpolab.verifiers._registry import register_details

_DETAIL_CHARS = 200  # the completion is truncated to this in the logged parts


def normalise(text: str) -> str:
    """Strip and collapse internal whitespace runs to a single space."""
    return " ".join(text.split())


def score_details(completion: str, reference: str) -> tuple[float | None, dict]:
    """Exact-match reward and its parts (``extracted``: the normalised completion, truncated)."""
    target = normalise(reference)
    answer = normalise(completion)  # linear time: fine even for megabytes
    parts = {"extracted": answer[:_DETAIL_CHARS], "reference": target[:_DETAIL_CHARS]}
    if not target:
        return None, parts
    return (1.0 if answer == target else 0.0), parts


def score(completion: str, reference: str) -> float | None:
    """1.0 if the whitespace-normalised completion equals the normalised reference, else 0.0."""
    return score_details(completion, reference)[0]


register_details("exact", score_details)
