"""The lr-selection section and the verdict's word on unbracketed lrs (grpolab.report.selection), for
selection tables with and without the sweep's ``round`` / ``bracketed`` columns."""

from __future__ import annotations

import pandas as pd
import pytest

from grpolab.report.selection import bracketing, selection_section, unbracketed_lines

pytestmark = pytest.mark.fast


def _grid(arms: dict[tuple[str, int], tuple[list[float], float]], rounds: dict[float, int] | None = None,
          bracketed: dict[tuple[str, int], bool] | None = None) -> pd.DataFrame:
    """Two selection seeds per (estimator, G, lr); validation score = lr * 100 (so the chosen lr is given)."""
    rows = []
    for (estimator, size), (lrs, chosen) in arms.items():
        for lr in lrs:
            for seed in (1000, 1001):
                row = {"estimator": estimator, "group_size": size, "lr": lr, "seed": seed,
                       "validation_score": lr * 100, "selected": lr == chosen}
                if rounds is not None:
                    row["round"] = rounds.get(lr, 0)
                if bracketed is not None:
                    row["bracketed"] = bracketed[(estimator, size)]
                rows.append(row)
    return pd.DataFrame(rows)


OLD_GRID = {("sign", 2): ([1e-4, 3e-4, 1e-3], 1e-3), ("dr_grpo", 2): ([1e-4, 3e-4, 1e-3], 3e-4),
            ("grpo", 4): ([1e-4, 3e-4, 1e-3], 1e-4)}


def test_an_old_table_infers_bracketing_from_the_grid_ends() -> None:
    table = bracketing(_grid(OLD_GRID)).set_index("estimator")
    assert table["bracketed"].to_dict() == {"sign": False, "dr_grpo": True, "grpo": False}  # ends vs inside
    assert table.loc["sign", "side"] == "largest" and table.loc["grpo", "side"] == "smallest"
    lines = unbracketed_lines(_grid(OLD_GRID))
    assert lines == [
        "The best lr for sign G = 2 is the largest tried (0.001); it may lie above the grid, so its results may "
        "understate it.",
        "The best lr for grpo G = 4 is the smallest tried (0.0001); it may lie below the grid, so its results may "
        "understate it.",
    ]


def test_a_bracketed_table_marks_the_added_lrs() -> None:
    arms = {("sign", 2): ([1e-4, 3e-4, 1e-3, 3e-3], 1e-3), ("dr_grpo", 2): ([3e-5, 1e-4, 3e-4, 1e-3], 3e-5)}
    selection = _grid(arms, rounds={3e-3: 1, 3e-5: 1}, bracketed={("sign", 2): True, ("dr_grpo", 2): False})
    assert unbracketed_lines(selection) == [
        "The best lr for dr_grpo G = 2 is the smallest tried (3e-05); it may lie below the grid, so its results "
        "may understate it."]
    section = selection_section(selection)
    table = section.tables[0][1]
    sign = list(table.loc[table["Estimator"] == "sign", "lr"])
    assert sign == ["0.0001", "0.0003", "0.001", "0.003 (added, round 1)"]
    assert list(table.loc[table["Chosen"] == "yes", "lr"]) == ["0.001", "3e-05 (added, round 1)"]
    assert "marked \"added\"" in section.paragraphs[0] and section.bullets == unbracketed_lines(selection)
    assert "Variant" not in table.columns


def test_variants_in_the_selection_table() -> None:
    selection = pd.concat([_grid(OLD_GRID).assign(variant="max_grad_norm=0"),
                           _grid(OLD_GRID).assign(variant="max_grad_norm=1")])
    assert "The best lr for sign G = 2 (max_grad_norm=0) is the largest tried" in unbracketed_lines(selection)[0]
    assert "Variant" in selection_section(selection).tables[0][1].columns


def test_diverged_selection_runs_are_counted_not_scored() -> None:
    selection = _grid({("sign", 2): ([1e-4, 3e-4, 1e-3], 3e-4)}).assign(status="finished")
    blew_up = (selection["lr"] == 1e-3) & (selection["seed"] == 1001)
    selection.loc[blew_up, ["status", "validation_score"]] = ["diverged", float("nan")]
    table = selection_section(selection).tables[0][1]
    row = table[table["lr"] == "0.001"].iloc[0]
    assert row["Diverged"] == 1 and row["Validation score"] == "10.0%"  # the seed that finished
    assert "Diverged" not in selection_section(_grid(OLD_GRID)).tables[0][1].columns


def test_the_worst_seed_is_shown_and_a_seed_floor_is_stated() -> None:
    selection = _grid({("sign", 2): ([1e-4, 3e-4], 1e-4)})
    selection.loc[(selection["lr"] == 3e-4) & (selection["seed"] == 1001), "validation_score"] = 0.0  # collapsed
    table = selection_section(selection).tables[0][1].set_index("lr")
    assert table["Worst seed"].to_dict() == {"0.0001": "1.0%", "0.0003": "0.0%"}
    assert table["Validation score"].to_dict() == {"0.0001": "1.0%", "0.0003": "1.5%"}
    plain = selection_section(selection, {"compare": {"lr_seed_floor": None}}).paragraphs[0]
    floored = selection_section(selection, {"compare": {"lr_seed_floor": 0.1}}).paragraphs[0]
    assert "the lr with the best mean validation score was chosen" in plain and "--lr-seed-floor" not in plain
    assert "whose every selection seed scored above 10% was chosen (--lr-seed-floor" in floored
    settings = {"compare": {"lr_seed_floor": 0.5}, "selection": {"below_floor": ["sign G=2"]}}
    below = selection_section(selection, settings)
    assert below.bullets[-1:] == ["No lr for sign G=2 had every selection seed above 50%: the one with the best "
                                  "worst seed was chosen, so its reported runs may collapse too."]
    assert len(below.bullets) == len(selection_section(selection).bullets) + 1
