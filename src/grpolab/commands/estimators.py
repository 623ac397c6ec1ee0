"""``grpolab estimators``: list the registered advantage estimators and what they accept."""

from __future__ import annotations

import argparse

from rich.table import Table

from grpolab import advantages
from grpolab.progress import console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    table = Table("name", "needs G >= 2", "binary only", "zero-sum (starves)", "reference")
    for name in sorted(advantages.available(), key=lambda n: (advantages.info(n).order, n)):  # display order
        entry = advantages.info(name)
        doc = (entry.fn.__doc__ or "").strip().splitlines()
        cite = next((line.strip() for line in doc if "arXiv" in line or "20" in line), "")
        table.add_row(name, _yes(entry.needs_group), _yes(entry.binary_only), _yes(entry.zero_sum), cite[:70])
    console.print(table)
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else ""
