"""MATH verifiers: ``math``, the last ``\\boxed{}`` answer, and ``math_final``, the answer in any of the forms the
harnesses' MATH tasks ask for; both checked with math-verify.

Extraction follows Minerva's ``last_boxed_only_string`` (Lewkowycz et al. 2022; PRM800K and
lm-eval-harness ``minerva_math`` use the same): the last ``\\boxed{...}`` or ``\\fbox{...}`` with nested
braces. Equivalence uses Hugging Face's math-verify (``parse`` + ``verify``), which handles
``\\frac{14}{3}`` = ``14/3``, ``\\left( 3, \\frac{\\pi}{2} \\right)`` = ``(3, \\pi/2)``, sets, intervals
and units better than the Minerva/PRM800K string normalisation (which compares normalised strings and
sympy-simplified differences). The reference is the bare answer (MATH's ``answer`` field) or a solution
text containing a ``\\boxed{}``; it is wrapped in ``\\boxed{}`` before parsing so that math-verify reads
it whole.

Departures and limits:

- a cheap pre-check first: if the two answers are equal as strings after removing whitespace,
  ``$``, ``\\left``/``\\right``, thin spaces, ``^\\circ`` and a trailing period, and mapping
  ``\\dfrac``/``\\tfrac`` to ``\\frac``, the reward is 1.0 without calling math-verify (the pre-check only
  ever says *equal*; ``precheck=False`` skips it);
- math-verify runs in a separate warm process (see ``_pool`` and ``_worker``) with a hard time limit
  (default 1 s; the process is killed on overrun), because its own signal-based time-outs only work in the
  main thread and cannot interrupt sympy inside one huge integer power (``10^{10^{10}}``);
- a completion without a box, with a box nested deeper than 64 levels or never closed, or an answer longer
  than 1,000 characters scores 0.0 without being checked; only the last 8 kB of the completion are read;
- a timed-out or crashed check scores 0.0 (as math-verify's own ``verify`` does), with ``timed_out`` in
  the details, so a policy cannot gain by producing slow answers;
- None only when the reference cannot be parsed.

``math_final`` (``final_answer``) reads the answer as lm-eval's MATH-family tasks ask for it, in this order: the last
``\\boxed{}``; Minerva's "Final Answer: The final answer is X. I hope it is correct." (``minerva_math``, whose
few-shot answers carry no box); the text between the first and the last ``$`` (``hendrycks_math``, ``aime``, as their
``process_results`` read it); else the whole response, stripped. It is the verifier ``grpolab eval --from-samples``
uses for those tasks: under ``math`` a response such as `` $24$`` scores 0 where the harness scores 1. Training
keeps ``math``: a boxed answer is the format its prompts ask for.
"""

from __future__ import annotations

import re

from grpolab.verifiers import _pool
from grpolab.verifiers._registry import register_details
from grpolab.verifiers._text import last_boxed

MAX_ANSWER_CHARS = 1000
"""Longer extracted answers (or references) are not sent to math-verify."""

DEFAULT_TIME_LIMIT_S = _pool.DEFAULT_TIME_LIMIT_S
"""Hard limit on one math-verify check; the call returns within about this plus 0.4 s."""

_NOISE_RE = re.compile(r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[,!;: ]|\\quad|\s+|\$|\^\{?\\circ\}?")


def normalise(answer: str) -> str:
    """String normalisation for the pre-check (see module docstring)."""
    answer = answer.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _NOISE_RE.sub("", answer).rstrip(".")


def reference_answer(reference: str) -> str:
    """The reference's answer: the content of its last ``\\boxed{}`` if it has one, else the whole text."""
    boxed = last_boxed(reference) if "boxed" in reference or "fbox" in reference else None
    return (boxed[0] if boxed is not None else reference).strip()


def score_details(
    completion: str, reference: str, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S, precheck: bool = True
) -> tuple[float | None, dict]:
    """MATH reward (1.0 / 0.0; None if the reference is unparseable) and its parts for logging.

    Parts: ``extracted`` (the boxed answer or None), ``mode`` (``no_answer``, ``too_long``, ``precheck`` or
    ``math_verify``), ``timed_out`` (bool) and ``reason`` (math-verify's outcome, when it ran).
    """
    boxed = last_boxed(completion)
    return _check(None if boxed is None else boxed[0].strip(), reference, time_limit_s=time_limit_s,
                  precheck=precheck)


_MINERVA = re.compile(r"Final Answer: The final answer is(.*?). I hope it is correct.", re.DOTALL)


def final_answer(completion: str) -> str | None:
    """The answer of ``math_final`` (see the module docstring): boxed, Minerva's final-answer line, between the first
    and last ``$``, else the whole response; None for an empty one. Only the last 8 kB are read, as ``last_boxed``
    reads them."""
    tail = completion[-8192:]
    boxed = last_boxed(tail)
    if boxed is not None:
        return boxed[0].strip()
    minerva = _MINERVA.search(tail + "I hope it is correct.")
    answer = minerva.group(1) if minerva else tail
    dollars = [i for i, char in enumerate(answer) if char == "$"]
    answer = answer[dollars[0] + 1:dollars[-1]] if len(dollars) > 1 else answer
    return answer.strip() or None


def score_final_details(completion: str, reference: str, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                        precheck: bool = True) -> tuple[float | None, dict]:
    """``math_final``'s reward and parts: ``score_details`` on the answer ``final_answer`` reads."""
    return _check(final_answer(completion), reference, time_limit_s=time_limit_s, precheck=precheck)


def _check(answer: str | None, reference: str, *, time_limit_s: float, precheck: bool) -> tuple[float | None, dict]:
    """The reward of an extracted ``answer`` (None: none found) against ``reference``, and its parts."""
    gold = reference_answer(reference)
    parts: dict = {"extracted": None if answer is None else answer[:200], "mode": None, "timed_out": False}
    if not gold or len(gold) > MAX_ANSWER_CHARS:
        parts["mode"] = "bad_reference"
        return None, parts
    if not answer:
        parts["mode"] = "no_answer"
        return 0.0, parts
    if len(answer) > MAX_ANSWER_CHARS:
        parts["mode"] = "too_long"
        return 0.0, parts
    if precheck and normalise(answer) == normalise(gold):
        parts["mode"] = "precheck"
        return 1.0, parts
    reply = _pool.check(gold, answer, time_limit_s)
    parts.update(mode="math_verify", timed_out=bool(reply["timed_out"]), reason=reply["reason"])
    return reply["score"], parts


def score(completion: str, reference: str, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> float | None:
    """MATH reward: 1.0 if the last boxed answer is equivalent to the reference (see module)."""
    return score_details(completion, reference, time_limit_s=time_limit_s)[0]


def warm_up(servers: int = 1) -> None:
    """Have ``servers`` math-verify server processes idle (starting one takes about 1-2 s) before checking."""
    _pool.warm_up(servers)


register_details("math", score_details)
register_details("math_final", score_final_details)
