"""A run that cannot learn says so early: when every group of each of its first steps is uniform (all right, all
wrong or unscorable: a group-centred advantage is 0 for all of its members, gradient-starvation paper, arXiv
2605.07689; a fixed-reference one such as ``sign`` only pushes every completion of an all-wrong group down), or
every advantage is 0, one warning line after those steps names the likely causes.

Watched: steps 1..``WATCHED_STEPS`` of the run's ``starvation/*`` metrics (``grpolab.metric_keys``), the ones both
engines write. A resumed run takes the watched steps before its checkpoint from its ``metrics.jsonl``
(``NoSignalWatch.resume``), so it judges the same steps an undisturbed run does; where that log lacks one of them
(damaged), it judges nothing rather than fewer steps. The causes follow from what the groups
were: every completion wrong (a verifier that always returns 0, an answer the verifier cannot read, a completion
cap too short, or a task far too hard), every completion right, one-completion groups, nothing scorable, or each
prompt solved always or never. Departure from the paper: it reports starvation rates; the warning is grpolab's.

With ``stop_when_dead`` (``--stop-when-dead``) the run also stops at the last watched step: it is evaluated and
saved there, and its ``summary.json`` holds ``"status": "no_signal"`` (``NO_SIGNAL``), ``"no_signal_at_step"`` and
the line as ``"reason"`` (``NoSignalWatch.summary_fields``). Unlike a diverged run it has an end score (that of a
policy that could not learn), so a comparison counts it in its arm and flags it.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["NO_SIGNAL", "WATCHED_STEPS", "NoSignalWarning", "NoSignalWatch", "no_signal_line"]

WATCHED_STEPS = 3
NO_SIGNAL = "no_signal"  # the summary.json status of a run that --stop-when-dead ended

_HARD = ("a verifier that always returns 0 (score a reference against itself and a completion), an answer format "
         "the verifier cannot read, --max-new-tokens too short for an answer, or a task far too hard for the model "
         "(grpolab preflight shows its pass rates)")


class NoSignalWarning(UserWarning):
    """The first steps of a run gave no gradient signal."""


def _dead(metrics: dict[str, Any]) -> bool:
    """Whether one step's groups carried no signal: every group uniform (all right, all wrong or unscorable, the
    rewards themselves, whatever the estimator makes of them: a fixed-reference one still pushes all-wrong groups
    down, towards nothing), or no completion with a non-zero advantage."""
    return metrics.get("starvation/uniform", 0.0) >= 1.0 or metrics.get("starvation/useful_fraction", 1.0) <= 0.0


def _causes(rows: list[dict[str, Any]], group_size: int) -> str:
    def every(key: str) -> bool:
        return all(row.get(key, 0.0) >= 1.0 for row in rows)

    if group_size == 1:
        return "groups of one completion (--group-size 1) are uniform by definition: use G >= 2"
    if every("starvation/all_wrong"):
        return f"every completion was wrong: likely {_HARD}"
    if every("starvation/all_correct"):
        return "every completion was right: likely a verifier that always returns 1, or a task the model already solves"
    if every("starvation/unscorable_groups"):
        return "the verifier scored no completion: check --verifier and the reference column"
    if all(row.get("starvation/uniform", 0.0) >= 1.0 for row in rows):
        return ("every prompt was solved always or never: the pass rates sit at 0 and 1 (grpolab preflight shows them; "
                "train on its pass-rate band or a larger G)")
    return "some groups were mixed but every advantage was 0: check the estimator's --advantage-kwargs"


def no_signal_line(rows: list[dict[str, Any]], group_size: int) -> str | None:
    """The warning for the watched steps' metrics ``rows`` when every one of them was dead, else None."""
    if not rows or not all(_dead(row) for row in rows):
        return None
    return (f"no gradient signal in the first {len(rows)} step(s): every group was all right, all wrong or "
            f"unscorable, or every advantage 0; {_causes(rows, group_size)}")


class NoSignalWatch:
    """Collects the watched steps' metrics and warns once (``NoSignalWarning``) after the last of them; with
    ``stop`` it also marks the run as stopping there (``stopped_at``)."""

    def __init__(self, group_size: int, watched: int = WATCHED_STEPS, *, stop: bool = False) -> None:
        self.group_size, self.watched, self.stop = group_size, watched, stop
        self.rows: list[dict[str, Any]] = []
        self.stopped_at: int | None = None
        self.line: str | None = None
        self.blind = False  # a resumed run whose log lacks a watched step before its checkpoint judges nothing

    def resume(self, start_step: int, logged: list[dict[str, Any]]) -> None:
        """Take the watched steps up to ``start_step`` (a resumed run's checkpoint) from ``logged``, the rows of its
        ``metrics.jsonl`` (each with its ``step``), as if it had observed them; without all of them, judge nothing."""
        earlier = {row.get("step"): row for row in logged if isinstance(row, dict)}
        wanted = range(1, min(start_step, self.watched) + 1)
        self.rows = [earlier[step] for step in wanted if step in earlier]
        self.blind = len(self.rows) < len(wanted)

    def observe(self, step: int, metrics: dict[str, Any]) -> str | None:
        """Record step ``step``; at the last watched step, warn and return the line when the run had no signal."""
        if step > self.watched:
            return None
        self.rows.append(metrics)
        if step < self.watched or self.blind:
            return None
        line = no_signal_line(self.rows, self.group_size)
        if line is not None:
            if self.stop:
                self.stopped_at = step
                line += f"; the run stops at step {step} (--stop-when-dead)"
            self.line = line
            warnings.warn(line, NoSignalWarning, stacklevel=2)
        return line

    def summary_fields(self) -> dict[str, Any]:
        """What a run that stopped here adds to its ``summary.json`` (empty when it did not stop)."""
        if self.stopped_at is None:
            return {}
        return {"status": NO_SIGNAL, "no_signal_at_step": self.stopped_at, "reason": self.line}
