"""Progress display for long work (rich): runs or steps done, elapsed time and time left, on stderr; and the
console for a command's results (tables, scores), on stdout so that they can be piped or redirected."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["console", "progress_bar", "results_console"]



class _ResultsConsole(Console):
    """rich's Console, except that a closed stdout (``grpolab audit | head``, head gone) raises
    ``BrokenPipeError`` for the command line to end quietly (``grpolab.cli``), where rich would exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


console = Console(stderr=True)
results_console = _ResultsConsole()


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress | None]:
    """A rich ``Progress`` (runs done / time left), or None when disabled."""
    if not enabled:
        yield None
        return
    columns: list[Any] = [
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
    ]
    with Progress(*columns, console=console, transient=False) as bar:
        yield bar
