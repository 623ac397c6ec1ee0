"""Progress display for long work (rich): runs or steps done, elapsed time and time left."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["console", "progress_bar"]

console = Console(stderr=True)


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
