"""``grpolab estimators``: every registered estimator, in display order, with its paper's full arXiv id from
the registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from grpolab import advantages
from grpolab.cli import main
from grpolab.commands import estimators

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("width", [60, 200])
def test_every_estimator_is_printed_with_its_full_arxiv_id(width: int, monkeypatch) -> None:
    console = Console(width=width, record=True, force_terminal=False)
    monkeypatch.setattr(estimators, "console", console)
    assert main(["estimators"]) == 0
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines)
    if width < estimators.WIDE:  # one block per estimator: its name, then "  field: value" lines
        starts = {name: lines.index(name) for name in advantages.available()}
        ends = [*sorted(starts.values())[1:], len(lines)]
        rows = {name: " ".join(lines[start:next(e for e in ends if e > start)]) for name, start in starts.items()}
    else:
        starts = {name: next(i for i, line in enumerate(lines) if line.startswith(f"│ {name} "))
                  for name in advantages.available()}
        rows = {name: lines[start] for name, start in starts.items()}
    for name, line in rows.items():
        paper = advantages.info(name).paper
        assert paper.arxiv in line and str(paper.year) in line, (name, line)
    assert sorted(rows, key=starts.get) == advantages.display_order(advantages.available())


def test_a_users_estimator_without_a_paper_is_listed(monkeypatch) -> None:
    console = Console(width=200, record=True, force_terminal=False)
    monkeypatch.setattr(estimators, "console", console)
    monkeypatch.setitem(advantages._REGISTRY, "test_mine",
                        advantages.Estimator("test_mine", lambda rewards: rewards, False, False, False))
    assert main(["estimators"]) == 0
    assert any(line.startswith("│ test_mine ") for line in console.export_text().splitlines())


def test_the_docs_page_holds_the_registrys_table(capsys) -> None:
    assert main(["estimators", "--markdown"]) == 0
    table = capsys.readouterr().out.strip()
    assert table == estimators.markdown_table(estimators.estimator_rows())
    assert all(f"| `{name}` |" in table for name in advantages.available())
    page = (Path(__file__).resolve().parents[2] / "docs" / "estimators.md").read_text(encoding="utf-8")
    assert table in page, "docs/estimators.md is stale: paste the output of `grpolab estimators --markdown`"


def test_the_table_goes_to_stdout(capsys) -> None:
    from grpolab.cli import main

    assert main(["estimators"]) == 0
    captured = capsys.readouterr()
    assert "dr_grpo" in captured.out and "dr_grpo" not in captured.err


def test_starves_on_is_computed_from_the_estimator_not_its_zero_sum_flag() -> None:
    """Was one column "zero-sum (starves)" reading the flag: pkpo, grpo_passk and opo starve on both uniform
    groups and read "no"; ngrpo starves on all-right groups and read "no"."""
    names = ("sign", "reinforce", "nsr", "ngrpo", "pkpo", "opo", "grpo", "optimal_token_baseline")
    said = {name: estimators.starves_on(advantages.info(name)) for name in names}
    assert said == {"sign": "no", "reinforce": "all wrong", "nsr": "all right", "ngrpo": "all right",
                    "pkpo": "all wrong, all right", "opo": "all wrong, all right", "grpo": "all wrong, all right",
                    "optimal_token_baseline": "-"}
