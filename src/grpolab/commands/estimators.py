"""``grpolab estimators``: list the registered advantage estimators, in display order, with what the registry
says of each (its flags, the reward granularities it has a form for, and its paper with the full arXiv id)."""

from __future__ import annotations

import argparse

from rich.table import Table

from grpolab import advantages
from grpolab.progress import console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    table = Table()
    table.add_column("name", no_wrap=True)  # names and arXiv ids are never cut; the paper title wraps
    for header in ("needs G >= 2", "binary only", "zero-sum (starves)", "granularity"):
        table.add_column(header)
    table.add_column("arXiv", no_wrap=True)
    table.add_column("year", no_wrap=True)
    table.add_column("paper", ratio=1)
    for name in advantages.display_order(advantages.available()):
        entry = advantages.info(name)
        paper = entry.paper
        table.add_row(name, _yes(entry.needs_group), _yes(entry.binary_only), _yes(entry.zero_sum),
                      ", ".join(entry.granularities), paper.arxiv if paper else "",
                      str(paper.year) if paper else "", paper.title if paper else "")
    console.print(table)
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else ""
