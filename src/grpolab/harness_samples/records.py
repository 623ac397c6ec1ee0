"""``HarnessSamples``: one task's documents as read from a harness's per-sample file, every response kept."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HarnessSamples"]


@dataclass
class HarnessSamples:
    """One task's samples from one file.

    source: the harness that wrote the file (``lm-eval`` or ``lighteval``).
    path: the file.
    task: the task's name as the harness wrote it in the file name (``gsm8k``, ``gsm8k|0``).
    doc_ids: each document's id, in file order [P].
    references: each document's reference answer, as the harness gives it to its metric [P].
    responses: each document's responses, every repeat [P][n_i].
    records: lines (lm-eval) or rows (lighteval) read; ``records - len(doc_ids)`` are extra filter lines.
    """

    source: str
    path: Path
    task: str
    doc_ids: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    responses: list[list[str]] = field(default_factory=list)
    records: int = 0

    @property
    def prompts(self) -> int:
        return len(self.doc_ids)

    @property
    def response_count(self) -> int:
        return sum(len(r) for r in self.responses)

    def add(self, doc_id: str, reference: str, responses: list[str]) -> None:
        self.doc_ids.append(doc_id)
        self.references.append(reference)
        self.responses.append(responses)
