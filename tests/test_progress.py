"""Progress where no terminal shows a live bar (a pipe, a log file, CI): flushed lines, not a bar cut at 80 columns
or held back until the end."""

from __future__ import annotations

import io

import pytest

from grpolab import progress
from grpolab.progress import LineProgress

pytestmark = pytest.mark.fast


def test_lines_at_start_every_interval_and_at_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    stream = io.StringIO()
    bar = LineProgress(stream, every_s=30.0)
    task = bar.add_task("train on cpu", total=4, info="")
    now[0] += 10
    bar.update(task, completed=1, info="reward 0.50")  # 10 s since the last line: none
    now[0] += 25
    bar.update(task, completed=2, info="reward 0.60")  # 35 s: a line
    bar.advance(task)  # 3 of 4, right after a line: none
    bar.update(task, completed=4, info="reward 0.75")  # complete: always a line
    assert stream.getvalue().splitlines() == [
        "train on cpu: 0/4 (0%), 0 s",
        "train on cpu: 2/4 (50%), 35 s, reward 0.60",
        "train on cpu: 4/4 (100%), 35 s, reward 0.75"]


def test_a_bar_that_is_not_on_a_terminal_is_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(progress.console), "is_terminal", property(lambda self: False))
    with progress.progress_bar(True) as bar:
        assert isinstance(bar, LineProgress)
    with progress.progress_bar(False) as bar:
        assert bar is None
