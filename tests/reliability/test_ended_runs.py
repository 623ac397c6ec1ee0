"""An ended run's results are never lost or dropped without a word (issue 35, items 1 and 2): readers cross-check
``eval.jsonl`` against ``summary.json`` and restore what the log lost or name the run; every advice the tool
prints is followed here and loses nothing; a resume checks that its logs reach the checkpoint's step."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.cli import main
from grpolab.config import TrainConfig
from grpolab.mechanism.runs import ReportedRun, evaluation_rows
from grpolab.sweep.gather import collect_results, runs_table
from grpolab.sweep.plan import plan_cells, plan_lr_grid
from grpolab.sweep.select import select_lrs
from grpolab.train import runlog
from sweep_runs import finish

BASE = TrainConfig(steps=4, lr=1e-4)
RESUME = ["--steps", "2", "--no-progress", "--threads", "1"]


def _with_summary(spec) -> None:
    """Give a hand-written run the summary.json that ``finish_run`` writes: every evaluation, successes included."""
    rows = runlog.read_metrics(spec.run_dir / "eval.jsonl")
    (spec.run_dir / "summary.json").write_text(json.dumps({"status": "finished", "steps": spec.config.steps,
                                                           "final_metrics": {}, "evaluations": rows}))


def _tear_last_line(path: Path) -> None:
    """What a kill (or a full disk) mid-append leaves: the last row cut in half."""
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[:last + (len(data) - last) // 2])


def _grid(tmp_path: Path):
    cells = plan_cells(["sign"], [2])
    grid = plan_lr_grid(BASE, {cell: [1e-4, 1e-3] for cell in cells}, [1000], tmp_path)
    for spec in grid:
        finish(spec, {1e-4: 0.2, 1e-3: 0.8}[spec.lr], split="validation")
        _with_summary(spec)
    return cells[0], grid


def test_a_torn_selection_eval_log_is_restored_from_the_summary_and_the_choice_stands(tmp_path: Path) -> None:
    cell, grid = _grid(tmp_path)
    best = next(spec for spec in grid if spec.lr == 1e-3)
    _tear_last_line(best.run_dir / "eval.jsonl")  # its end (validation) row is gone
    with pytest.warns(UserWarning, match=r"eval.jsonl lacks 1 evaluation.*summary.json.*end at step 4"):
        selection = select_lrs(grid)
    assert selection.choice == {cell: 1e-3}  # before: 1e-4, the torn run dropped as if never tried
    assert len(selection.table) == 2


def test_a_selection_run_with_no_end_row_anywhere_is_named(tmp_path: Path) -> None:
    cell, grid = _grid(tmp_path)
    best = next(spec for spec in grid if spec.lr == 1e-3)
    (best.run_dir / "summary.json").write_text(json.dumps({"status": "finished"}))  # an old summary: no rows
    _tear_last_line(best.run_dir / "eval.jsonl")
    with pytest.warns(UserWarning, match=rf"selection run {best.run_dir} finished but neither its eval.jsonl nor"):
        selection = select_lrs(grid)
    assert selection.choice == {cell: 1e-4}


@pytest.mark.parametrize("damage", ["torn", "mid-file", "deleted"])
def test_gathering_and_mechanism_restore_a_finished_runs_lost_end_row(tmp_path: Path, damage: str) -> None:
    _, grid = _grid(tmp_path)
    run = grid[0]
    path = run.run_dir / "eval.jsonl"
    if damage == "torn":
        _tear_last_line(path)
    elif damage == "mid-file":
        path.write_bytes(b"{oops\n" + path.read_bytes())
    else:
        path.unlink()
    with pytest.warns(UserWarning, match=rf"{path} lacks \d evaluation"):
        results, _ = collect_results(grid)
    assert sorted(results.loc[results["phase"] == "end", "lr"]) == [1e-4, 1e-3]  # before: the run dropped out
    with pytest.warns(UserWarning, match=rf"{path} lacks"):
        table = runs_table(grid, [], None)
    assert table["end_greedy"].notna().all()
    reported = ReportedRun(run.run_id, run.estimator, run.group_size, run.seed, run.lr, run.run_dir, run.config)
    with pytest.warns(UserWarning, match=rf"{path} lacks"):
        phases = [row["phase"] for row in evaluation_rows(reported)]
    assert phases == ["start", "end"]


def test_a_finished_run_with_no_end_row_anywhere_is_named_by_gather_and_mechanism(tmp_path: Path) -> None:
    _, grid = _grid(tmp_path)
    run = grid[0]
    (run.run_dir / "summary.json").write_text(json.dumps({"status": "finished"}))
    _tear_last_line(run.run_dir / "eval.jsonl")
    with pytest.warns(UserWarning, match=rf"run {run.run_dir} finished but neither its eval.jsonl nor its summary"):
        collect_results(grid)
    reported = ReportedRun(run.run_id, run.estimator, run.group_size, run.seed, run.lr, run.run_dir, run.config)
    with pytest.warns(UserWarning, match=rf"run {run.run_id}: neither .*eval.jsonl nor its summary.json"):
        evaluation_rows(reported)


def test_gather_names_a_finished_runs_missing_metrics_steps(tmp_path: Path) -> None:
    _, grid = _grid(tmp_path)  # each run logged step 1 of its 4
    with pytest.warns(UserWarning, match=r"metrics.jsonl lacks step\(s\) 2-4 of its 4"):
        collect_results(grid)


@pytest.mark.parametrize("log", ["metrics.jsonl", "eval.jsonl"])
def test_following_the_advice_for_a_damaged_log_loses_nothing(finished_run, capsys, log) -> None:
    summary = json.loads((finished_run / "summary.json").read_text())
    evaluations = runlog.read_metrics(finished_run / "eval.jsonl")
    path = finished_run / log
    path.write_bytes(b"{oops\n" + path.read_bytes())
    code, err = run_cli(["train", "--out", str(finished_run), "--resume", *RESUME], capsys)
    line = assert_one_line_error(code, err, str(path), "move it aside and resume")
    assert "grpolab train --resume" in line
    shutil.move(path, finished_run / f"{log}.damaged")  # the advice, followed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, err = run_cli(["train", "--out", str(finished_run), "--resume", *RESUME], capsys)
    assert code == 0, err
    after = json.loads((finished_run / "summary.json").read_text())
    assert after["evaluations"] == summary["evaluations"] != []  # before: "evaluations": []
    assert after["final_metrics"] == summary["final_metrics"]
    if log == "eval.jsonl":  # re-logged from summary.json
        assert [runlog.evaluation_key(r) for r in runlog.read_metrics(path)] == \
            [runlog.evaluation_key(r) for r in evaluations]
        assert any("written back from" in str(w.message) for w in caught)
    else:  # the metrics of trained steps cannot come back: named
        assert any(f"{path} lacks step(s) 1-2" in str(w.message) for w in caught)


def test_a_resume_names_the_gap_a_metrics_log_that_lost_its_tail_leaves(finished_run, capsys) -> None:
    rows = runlog.read_metrics(finished_run / "metrics.jsonl")
    runlog.rewrite_jsonl(finished_run / "metrics.jsonl", rows[:1])  # step 2 lost; the checkpoint is at step 2
    (finished_run / "rollouts" / "step-000002.parquet").unlink()
    with pytest.warns(UserWarning) as caught:
        code, err = run_cli(["train", "--out", str(finished_run), "--resume", "--steps", "3", "--no-progress",
                             "--threads", "1"], capsys)
    assert code == 0, err
    messages = [str(w.message) for w in caught]
    assert any("metrics.jsonl lacks step(s) 2 of the 2 the checkpoint holds" in m for m in messages), messages
    assert any("rollouts lacks the completions of step(s) 2" in m for m in messages), messages
    assert [row["step"] for row in runlog.read_metrics(finished_run / "metrics.jsonl")] == [1, 3]


def test_an_extended_run_whose_eval_log_lost_its_end_row_keeps_it_as_a_step_evaluation(finished_run, capsys):
    _tear_last_line(finished_run / "eval.jsonl")
    with pytest.warns(UserWarning, match="written back from"):
        code, err = run_cli(["train", "--out", str(finished_run), "--resume", "--steps", "3", "--no-progress",
                             "--threads", "1"], capsys)
    assert code == 0, err
    rows = runlog.read_metrics(finished_run / "eval.jsonl")
    assert [(r["step"], r["phase"]) for r in rows] == [(2, "step"), (3, "end")]


def test_the_spans_of_missing_steps_read_as_ranges() -> None:
    assert runlog.missing_steps([1, 2, 3, 6, 7], 7) == [4, 5]
    assert runlog.spans([1, 2, 3, 6, 8, 9]) == "1-3, 6, 8-9"


def test_a_compare_that_cannot_count_a_selection_run_names_it_and_fails(tmp_path: Path) -> None:
    """The torn-eval probe through ``grpolab.compare``: a selection run whose end row is in neither eval.jsonl
    nor summary.json is named, and the comparison counts as failed (exit 1), never a quiet exit 0."""
    from grpolab.config import CompareConfig
    from grpolab.sweep import compare
    from grpolab.sweep.plan import plan_runs

    sweep = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4,1e-3", selection_seeds=1,
                          workers=1, lr_bracket_rounds=0)
    cell, grid = _grid(tmp_path)
    best = next(spec for spec in grid if spec.lr == 1e-3)
    (best.run_dir / "summary.json").write_text(json.dumps({"status": "finished"}))  # an old summary: no rows
    _tear_last_line(best.run_dir / "eval.jsonl")
    for spec in plan_runs(BASE, ["sign"], [0], [2], tmp_path, lrs={cell: 1e-4}):
        finish(spec, 0.5)
    with pytest.warns(UserWarning, match=rf"selection run {best.run_dir} finished but neither"):
        result = compare(sweep, BASE, tmp_path, report=False)
    assert [outcome["run_id"] for outcome in result.failed] == [best.run_id]  # before: [], so exit 0
    assert "could not be counted" in result.failed[0]["error"]
    assert str(best.run_dir) in result.failed[0]["error"]


def test_a_compare_that_cannot_count_a_result_run_fails(tmp_path: Path) -> None:
    from grpolab.config import CompareConfig
    from grpolab.sweep import compare
    from grpolab.sweep.plan import plan_runs

    sweep = CompareConfig(estimators="sign", seeds=2, group_sizes="2", lrs="1e-4", workers=1)
    specs = plan_runs(BASE, ["sign"], [0, 1], [2], tmp_path)
    for spec in specs:
        finish(spec, 0.5)
    (specs[1].run_dir / "summary.json").write_text(json.dumps({"status": "finished"}))
    _tear_last_line(specs[1].run_dir / "eval.jsonl")
    with pytest.warns(UserWarning, match=rf"run {specs[1].run_dir} finished but neither"):
        result = compare(sweep, BASE, tmp_path, report=False)
    assert [outcome["run_id"] for outcome in result.failed] == [specs[1].run_id]


def test_the_compare_command_exits_non_zero_when_a_run_cannot_be_counted(tmp_path: Path, capsys) -> None:
    from grpolab.cli import main
    from grpolab.sweep.plan import plan_runs

    specs = plan_runs(TrainConfig(steps=4, lr=1e-4), ["sign"], [0, 1], [2], tmp_path)
    for spec in specs:
        finish(spec, 0.5)
    argv = ["compare", "--out", str(tmp_path), "--estimators", "sign", "--seeds", "2", "--group-sizes", "2", "--lrs",
            "1e-4", "--steps", "4", "--no-report"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(argv) == 0  # nothing to train, every run counted
        (specs[1].run_dir / "summary.json").write_text(json.dumps({"status": "finished"}))
        _tear_last_line(specs[1].run_dir / "eval.jsonl")
        assert main(argv) == 1  # before: 0, the run silently left out of the comparison
    capsys.readouterr()


def test_a_damaged_eval_log_keeps_its_per_prompt_successes_through_the_summary(tmp_path):
    """``summary.json`` keeps each evaluation's per-prompt successes, so a damaged ``eval.jsonl`` is restored whole
    (before: restored without them, so the report's per-prompt sections silently lost the seed)."""
    run = tmp_path / "run"
    assert main(["train", "--out", str(run), "--steps", "1", "--prompts-per-step", "2", "--eval-limit", "4",
                 "--eval-samples", "2", "--no-progress", "--threads", "1"]) == 0
    logged = runlog.read_metrics(run / "eval.jsonl")
    assert [len(row["successes"]) for row in logged] == [4, 4]  # start and end, 4 prompts each
    lines = (run / "eval.jsonl").read_text().splitlines()
    (run / "eval.jsonl").write_text("{oops\n" + "\n".join(lines[1:]) + "\n")  # damaged mid-file
    with pytest.warns(UserWarning, match="lacks 2 evaluation") as caught:
        restored = runlog.read_evaluations(run)
    assert "without per-prompt successes" not in str(caught[0].message)
    assert [row["successes"] for row in restored] == [row["successes"] for row in logged]


def test_rows_restored_from_an_older_summary_are_named_as_lacking_successes(tmp_path):
    rows = [{"step": 0, "phase": "start", "n": 2}, {"step": 2, "phase": "end", "n": 2, "successes": [1, 2]},
            {"step": 2, "phase": "end", "n": 0}]
    assert runlog.without_successes(rows) == (" (1 of them without per-prompt successes, which that summary "
                                              "predates: start at step 0)")
    assert runlog.without_successes(rows[1:]) == ""
