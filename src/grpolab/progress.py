"""Progress display for long work (rich): runs or steps done, elapsed time and time left, on stderr; and the
console for a command's results (tables, scores), on stdout so that they can be piped or redirected.

On a terminal the display is rich's live bar. Anywhere else (a pipe, a log file, a CI job) a live bar either
shows nothing until the end or is cut at 80 columns, so the same calls print plain lines instead
(``LineProgress``): one when a task starts, then at most one every ``LINE_EVERY_S`` seconds and one when it
completes, each flushed."""

from __future__ import annotations

import contextlib
import errno
import sys
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["LINE_EVERY_S", "LineProgress", "console", "print_frame", "print_text", "progress_bar", "results_console"]

LINE_EVERY_S = 30.0
"""Seconds between two progress lines of one task when stderr is not a terminal."""

class _ResultsConsole(Console):
    """rich's Console, except that a closed stdout (``grpolab audit | head``, head gone) raises
    ``BrokenPipeError`` for the command line to end quietly (``grpolab.cli``), where rich would exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


console = Console(stderr=True)
results_console = _ResultsConsole()


def print_text(text: str) -> None:
    """A line of results on stdout, wrapped at the console's width: the terminal's, else ``COLUMNS``, else 80."""
    results_console.print(text, markup=False, highlight=False)


def print_frame(frame: Any) -> None:
    """A ``pandas.DataFrame`` on stdout (without its index), its columns in blocks that each fit the console's
    width (pandas' ``line_width``): a table as wide as its headers would be cut or folded by a pipe or a log."""
    text = frame.to_string(index=False, line_width=results_console.width)
    results_console.print(text, markup=False, highlight=False, soft_wrap=True)


class LineProgress:
    """The part of rich's ``Progress`` grpolab calls (``add_task``, ``update``, ``advance``), as flushed lines on
    ``stream``: 'train on cpu: 5/20 (25%), 12 s, reward 0.41 ...'."""

    def __init__(self, stream: Any = None, every_s: float = LINE_EVERY_S) -> None:
        self.stream, self.every_s = stream or sys.stderr, every_s
        self.tasks: list[dict[str, Any]] = []

    def add_task(self, description: str, *, total: float | None = None, completed: float = 0, **fields: Any) -> int:
        self.tasks.append({"description": description, "total": total, "completed": completed, "fields": fields,
                           "started": time.monotonic(), "printed": None})
        self._line(len(self.tasks) - 1)
        return len(self.tasks) - 1

    def update(self, task_id: int, *, completed: float | None = None, advance: float = 0, total: float | None = None,
               description: str | None = None, **fields: Any) -> None:
        task = self.tasks[task_id]
        task["completed"] = (task["completed"] if completed is None else completed) + advance
        task["total"] = task["total"] if total is None else total
        task["description"] = description or task["description"]
        task["fields"].update(fields)
        done = task["total"] is not None and task["completed"] >= task["total"]
        if done or time.monotonic() - task["printed"] >= self.every_s:
            self._line(task_id)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _line(self, task_id: int) -> None:
        task = self.tasks[task_id]
        total, done = task["total"], task["completed"]
        share = f" ({100 * done / total:.0f}%)" if total else ""
        info = str(task["fields"].get("info") or "")
        elapsed = time.monotonic() - task["started"]
        count = f"{done:g}/{total:g}" if total is not None else f"{done:g}"
        print(f"{task['description']}: {count}{share}, {elapsed:.0f} s{', ' + info if info else ''}", file=self.stream,
              flush=True)
        task["printed"] = time.monotonic()


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress | LineProgress | None]:
    """A rich ``Progress`` (runs done / time left) on a terminal, ``LineProgress`` elsewhere, or None when
    disabled."""
    if not enabled:
        yield None
        return
    if not console.is_terminal:
        yield LineProgress()
        return
    columns: list[Any] = [
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
    ]
    with Progress(*columns, console=console, transient=False) as bar:
        yield bar
