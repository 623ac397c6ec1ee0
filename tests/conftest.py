"""Fixtures shared across the test folders."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from in_process_workers import workers_in_process


@pytest.fixture
def in_process_workers() -> Iterator[None]:
    """A sweep's local runs train in this process, not in spawned workers (``tests/in_process_workers.py``)."""
    with workers_in_process():
        yield
