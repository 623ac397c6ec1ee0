"""``grpolab estimators``: list the registered advantage estimators, in display order, with what the registry
says of each (its flags, the reward granularities it has a form for, its hyper-parameters with their defaults,
the ``--advantage-kwargs`` keys, and its paper with the full arXiv id). ``--markdown`` prints the same table as
Markdown (docs/estimators.md holds it)."""

from __future__ import annotations

import argparse
import inspect
import textwrap

from rich.table import Table

from grpolab import advantages
from grpolab.progress import results_console as console

COLUMNS = ("name", "needs G >= 2", "binary only", "zero-sum", "starves on", "granularity", "hyper-parameters",
           "arXiv", "year", "paper")
UNIFORM_GROUPS = ((0.0,) * 4, (1.0,) * 4)
"""The groups ``starves on`` computes each estimator on: all wrong and all right, at G = 4."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")


def run(args: argparse.Namespace) -> int:
    rows = estimator_rows()
    if args.markdown:
        print(markdown_table(rows))
        return 0
    if console.width < WIDE:
        _print_records(rows)
        return 0
    table = Table()
    for column in COLUMNS:  # names and arXiv ids are never cut; the paper title wraps
        table.add_column(column, no_wrap=column in ("name", "arXiv", "year"), ratio=1 if column == "paper" else None)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return 0


WIDE = 140
"""Columns below which the table's ten columns are cut to '…' (80 in a pipe): each estimator is a block instead."""


def _print_records(rows: list[tuple[str, ...]]) -> None:
    """Each estimator as a block of ``field: value`` lines, wrapped at the console's width (a yes/no flag left
    empty in the table reads "no"; other empty fields are left out)."""
    flags = COLUMNS[1:4]
    for row in rows:
        fields = dict(zip(COLUMNS, row, strict=True))
        lines = [fields["name"]]
        for column in COLUMNS[1:]:
            value = fields[column] or ("no" if column in flags else "")
            if value:
                lines += textwrap.wrap(f"{column}: {value}", console.width, initial_indent="  ",
                                       subsequent_indent="    ")
        console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def estimator_rows() -> list[tuple[str, ...]]:
    """One row of ``COLUMNS`` per registered estimator, in display order, read from the registry."""
    rows = []
    for name in advantages.display_order(advantages.available()):
        entry = advantages.info(name)
        paper = entry.paper
        rows.append((name, _yes(entry.needs_group), _yes(entry.binary_only), _yes(entry.zero_sum), starves_on(entry),
                     ", ".join(entry.granularities), hyperparameters(entry), paper.arxiv if paper else "",
                     str(paper.year) if paper else "", paper.title if paper else ""))
    return rows


def starves_on(entry: advantages.Estimator) -> str:
    """The uniform groups (``UNIFORM_GROUPS``) the estimator, at its default hyper-parameters, gives advantages all
    zero (|A| <= the audit's ``ZERO_ADVANTAGE_ATOL``): computed, not read from a flag (``zero_sum`` is not the same:
    pkpo is not zero-sum and still starves both); "-" for one whose advantages depend on the policy's per-token
    statistics."""
    from grpolab.diagnostics.starvation import ZERO_ADVANTAGE_ATOL

    if entry.needs_token_statistics:
        return "-"
    lengths = [[8] * len(group) for group in UNIFORM_GROUPS] if entry.needs_lengths else None
    values = advantages.compute_advantages(entry.name, [list(group) for group in UNIFORM_GROUPS], lengths=lengths)
    zero = (values.abs() <= ZERO_ADVANTAGE_ATOL).all(dim=1).tolist()
    return ", ".join(kind for kind, starved in zip(("all wrong", "all right"), zero, strict=True) if starved) or "no"


def hyperparameters(entry: advantages.Estimator) -> str:
    """``k=2, baseline='loo_minus_one'``: the estimator's keyword hyper-parameters and their defaults (the keys of
    ``--advantage-kwargs``), then ``lengths (from the trainer)`` for an estimator that needs completion lengths, and
    ``per-token policy statistics (from the trainer)`` for one that needs them."""
    try:
        parameters = list(inspect.signature(entry.fn).parameters.values())[1:]  # after the rewards
    except (TypeError, ValueError):  # a callable without a signature
        parameters = []
    names = [f"{p.name}={p.default!r}" for p in parameters
             if p.kind is p.KEYWORD_ONLY and p.default is not p.empty and p.name != "lengths"]
    if entry.needs_lengths:
        names.append("lengths (from the trainer)")
    if entry.needs_token_statistics:
        names.append("per-token policy statistics (from the trainer)")
    return ", ".join(names)


def markdown_table(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(f"`{cell}`" if i == 0 else cell for i, cell in enumerate(row)) + " |" for row in rows]
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else ""
