"""`grpolab compare` end to end on tiny budgets: tables, report, and resuming a killed sweep."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from tests.reliability._diverge import force_divergence

from grpolab.cli import main
from grpolab.train.lock import DirectoryLock

TINY_FLAGS = ["--steps", "2", "--prompts-per-step", "4", "--eval-limit", "8", "--eval-samples", "2",
              "--checkpoint-every", "1"]
ONE_LR = ["--lrs", "1e-3"]  # one lr: no selection phase


def test_compare_writes_tables_and_report(tmp_path: Path, in_process_workers: None) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--estimators", "sign,dr_grpo", "--seeds", "2", "--group-sizes", "2",
                 "--workers", "2", "--out", str(out), *ONE_LR, *TINY_FLAGS])
    assert code == 0
    results = pd.read_parquet(out / "results.parquet")
    assert len(results) == 2 * 2 * 2  # runs x (start, end)
    assert results.groupby(["run_id", "phase"]).size().eq(1).all()
    assert set(results["estimator"]) == {"sign", "dr_grpo"}
    assert results["greedy_accuracy"].between(0, 1).all()
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert len(metrics) == 4 * 2 and "starvation/degenerate" in metrics
    for name in ("report.html", "report.md", "compare.yaml"):
        assert (out / name).is_file(), name
    assert not (out / "compare.json").exists(), "the settings are saved once, in compare.yaml"


def test_a_compare_rerun_with_other_settings_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                        in_process_workers: None) -> None:
    out = tmp_path / "cmp"
    sweep = ["compare", "--estimators", "sign", "--seeds", "1", "--group-sizes", "2", "--workers", "1",
             "--out", str(out), "--no-report", "--lrs", "1e-4"]
    assert main([*sweep, *TINY_FLAGS]) == 0
    results = (out / "results.parquet").read_bytes()
    capsys.readouterr()
    code = main([*sweep, *TINY_FLAGS, "--steps", "3", "--lrs", "3e-4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in ("holds a sweep made with", "lrs '1e-4', steps 2", "this command gives lrs '3e-4', steps 3",
                   "choose a new --out"):
        assert needle in err, (needle, err)
    assert (out / "results.parquet").read_bytes() == results
    assert main([*sweep, *TINY_FLAGS, "--workers", "2"]) == 0  # how many workers run it is not a setting of it


def test_ctrl_c_stops_a_sweep_at_once_and_a_second_compare_is_refused_meanwhile(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cmp"
    argv = ["compare", "--estimators", "sign,dr_grpo", "--seeds", "1", "--group-sizes", "2", "--workers", "1",
            "--out", str(out), "--no-report", "--lrs", "1e-4", "--steps", "200", "--prompts-per-step", "2",
            "--eval-samples", "0", "--eval-limit", "4", "--checkpoint-every", "1"]
    process = subprocess.Popen([sys.executable, "-m", "grpolab.cli", *argv], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not any(p.stat().st_size for p in out.glob("runs/*/metrics.jsonl")):
        assert process.poll() is None and time.monotonic() < deadline, "the sweep did not start training"
        time.sleep(0.05)

    code = main(argv)  # a second sweep on the same --out while the first is writing
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"pid {process.pid}" in err, err

    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole process group
    time.sleep(0.3)
    os.killpg(process.pid, signal.SIGINT)  # and a second, impatient one
    _, stderr = process.communicate(timeout=60)  # a hang guard, not a speed claim
    assert process.returncode == 130, stderr[-2000:]
    running = out / "runs" / "sign-G2-seed0"  # "at once": the running run was ended, not run to its end
    logged = (running / "metrics.jsonl").read_text().splitlines()
    assert not (running / "summary.json").exists() and 0 < len(logged) < 200, len(logged)
    assert "Traceback" not in stderr and "rerun with the same --out to resume" in stderr, stderr
    trained = sorted(p.parent.name for p in out.glob("runs/*/metrics.jsonl") if p.stat().st_size)
    assert trained == ["sign-G2-seed0"], f"the queued run trained after Ctrl-C: {trained}"
    for run in out.glob("runs/*"):  # no worker still holds a run directory
        DirectoryLock(run, "test").acquire().release()


def _finished(out: Path) -> list[Path]:
    return sorted((out / "runs").glob("*/summary.json"))


def test_killed_sweep_resumes_without_redoing_finished_runs(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            in_process_workers: None) -> None:
    """The sweep killed is a real process with its worker; the re-run trains in this process
    (``in_process_workers``): what it checks is which runs it trains, which no worker process changes."""
    out = tmp_path / "cmp"
    argv = ["compare", "--estimators", "sign,dr_grpo", "--seeds", "2", "--group-sizes", "2", "--workers", "1",
            "--out", str(out), "--no-report", "--steps", "6", "--prompts-per-step", "4", "--eval-limit", "8",
            "--eval-samples", "2", "--checkpoint-every", "1", *ONE_LR]
    process = subprocess.Popen([sys.executable, "-m", "grpolab.cli", *argv], start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(_finished(out)) < 2 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    done_before = {p: p.stat().st_mtime_ns for p in _finished(out)}
    assert 2 <= len(done_before) < 4, "the sweep should be killed part-way"
    capsys.readouterr()
    assert main(argv) == 0
    said = capsys.readouterr()
    assert f"{len(done_before)} of 4 runs already finished" in said.err + said.out, said.err[-2000:]
    for path, mtime in done_before.items():
        assert path.stat().st_mtime_ns == mtime, f"{path.parent.name} was redone"
    results = pd.read_parquet(out / "results.parquet")
    assert results.groupby(["run_id", "phase"]).size().eq(1).all()
    assert results["run_id"].nunique() == 4


def test_lr_selection_uses_validation_only_and_reports_fresh_seeds(tmp_path: Path, in_process_workers: None) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--estimators", "sign,grpo", "--seeds", "2", "--group-sizes", "4", "--workers", "2",
                 "--lrs", "1e-5,3e-3", "--lr-bracket-rounds", "0", "--selection-seeds", "1", "--out", str(out),
                 *TINY_FLAGS, "--steps", "6", "--eval-limit", "32", "--eval-samples", "4"])
    assert code == 0
    selection = pd.read_parquet(out / "selection.parquet")
    assert len(selection) == 2 * 2 and set(selection["seed"]) == {1000}  # (estimator, lr) on selection seeds
    assert selection.groupby("estimator")["selected"].sum().eq(1).all()
    chosen = selection[selection["selected"]].set_index("estimator")["lr"]
    best = selection.sort_values("validation_score").groupby("estimator").tail(1).set_index("estimator")["lr"]
    assert chosen.sort_index().equals(best.sort_index())  # the best validation score wins
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["seed"]) == {0, 1}  # reported runs are fresh seeds, never the selection runs
    for estimator, lr in chosen.items():
        assert set(results.loc[results["estimator"] == estimator, "lr"]) == {lr}
    for eval_log in (out / "selection").glob("*/eval.jsonl"):  # selection never looked at the test split
        rows = pd.read_json(eval_log, lines=True)
        assert set(rows["split"]) == {"validation"} and not any(i.startswith("reverse-test")
                                                               for ids in rows["problem_ids"] for i in ids)
    report = (out / "report.md").read_text()
    assert report.index("## Verdict") < report.index("## Summary") < report.index("## Learning-rate selection")
    assert "## Per-family breakdown" in report and "Primary comparison (sign vs grpo), G = 4: " in report
    assert "The primary comparison sign vs grpo was declared at " in report  # recorded in compare.yaml when planned
    assert ", before any run of this sweep trained" in report  # and what it says of earlier results (verdict.py)
    runs = pd.read_csv(out / "runs.csv")  # one row per run, the lr-grid runs included
    assert sorted(runs["role"]) == ["result"] * 4 + ["selection"] * 4
    grid = runs[runs["role"] == "selection"]
    assert set(grid["split"]) == {"validation"} and grid["start_greedy"].isna().all()  # no start evaluation
    assert grid.set_index(["estimator", "lr"])["end_pass_at_1"].sort_index().equals(
        selection.set_index(["estimator", "lr"])["validation_score"].sort_index().rename("end_pass_at_1"))
    reported = runs[runs["role"] == "result"]
    assert set(reported["split"]) == {"test"} and reported["start_greedy"].notna().all()
    end = results[results["phase"] == "end"].set_index("run_id")["greedy_accuracy"]
    assert reported.set_index("run_id")["end_greedy"].sort_index().equals(end.sort_index().rename("end_greedy"))
    assert reported["end_unscorable"].between(0, 1).all()


def test_one_lr_runs_without_selection_and_lr_beside_lrs_is_refused(tmp_path: Path, in_process_workers: None) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--estimators", "sign", "--seeds", "1", "--group-sizes", "2", "--lr", "3e-4",
                 "--out", str(out), "--no-report", *TINY_FLAGS])
    assert code == 0 and not (out / "selection.parquet").exists() and not (out / "selection").exists()
    assert set(pd.read_parquet(out / "results.parquet")["lr"]) == {3e-4}
    assert main(["compare", "--lr", "3e-4", "--lrs", "1e-4,1e-3", "--out", str(tmp_path / "other")]) == 2
    (tmp_path / "one-lr.yaml").write_text('lrs: ""\nlr: 1.0e-3\n')  # an empty grid is no grid
    code = main(["compare", "--config", str(tmp_path / "one-lr.yaml"), "--estimators", "sign", "--seeds", "1",
                 "--group-sizes", "2", "--out", str(tmp_path / "file"), "--no-report", *TINY_FLAGS])
    assert code == 0 and set(pd.read_parquet(tmp_path / "file" / "results.parquet")["lr"]) == {1e-3}


def _cells_of(selection: pd.DataFrame) -> pd.DataFrame:
    """Per (estimator, G): the chosen lr, the lrs tried, whether bracketed, the rounds that added lrs."""
    chosen = selection[selection["selected"]].groupby(["estimator", "group_size"])["lr"].first()
    return pd.DataFrame({"chosen": chosen, "tried": selection.groupby(["estimator", "group_size"])["lr"].unique(),
                         "bracketed": selection.groupby(["estimator", "group_size"])["bracketed"].all(),
                         "rounds": selection.groupby(["estimator", "group_size"])["round"].max()})


def test_a_best_lr_at_the_edge_of_the_grid_is_extended_or_said_to_be(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                   in_process_workers: None) -> None:
    """The acceptance case: ``--lrs 1e-5,3e-5`` on the embedded default never reports an edge lr silently."""
    sweep = ["compare", "--estimators", "sign,dr_grpo", "--seeds", "1", "--group-sizes", "2", "--workers", "2",
             "--selection-seeds", "1", "--lrs", "1e-5,3e-5", "--no-report", *TINY_FLAGS]
    assert main([*sweep, "--out", str(tmp_path / "none"), "--lr-bracket-rounds", "0"]) == 0
    said = capsys.readouterr().err
    cells = _cells_of(pd.read_parquet(tmp_path / "none" / "selection.parquet"))
    assert not cells["bracketed"].any() and (cells["rounds"] == 0).all()  # two lrs: any choice is an edge
    for estimator in ("sign", "dr_grpo"):  # at the edge, or tied (tiny runs may score alike): said either way
        edge = f"the lr chosen for {estimator} G=2" in said and "not bracketed" in said
        assert edge or f"tie for the best validation score of {estimator} G=2" in said, said
    results = pd.read_parquet(tmp_path / "none" / "results.parquet")
    assert results["bracketed"].eq(False).all()  # the report can say so too

    out = tmp_path / "bracketed"
    assert main([*sweep, "--out", str(out)]) == 0
    said = capsys.readouterr().err
    cells = _cells_of(pd.read_parquet(out / "selection.parquet"))
    for (estimator, size), cell in cells.iterrows():
        if f"tie for the best validation score of {estimator} G={size}" in said:
            continue  # a tie is said, and its grid is not extended (tests/sweep/test_select.py)
        assert cell["rounds"] >= 1  # every edge choice made the grid grow
        inside = min(cell["tried"]) < cell["chosen"] < max(cell["tried"])
        assert cell["bracketed"] == inside
        assert (f"the lr chosen for {estimator} G={size}" in said) == (not inside), said
        ratios = sorted(cell["tried"])
        assert all(abs(b / a - 3) < 0.02 for a, b in itertools.pairwise(ratios))  # the grid's ratio
    assert main([*sweep, "--out", str(out)]) == 0  # a finished sweep re-run trains nothing
    said = capsys.readouterr().err
    assert "0 run(s) trained" in said and not re.search(r"[1-9]\d* run\(s\) trained", said), said


def test_vary_adds_an_axis_with_its_own_runs_and_rows(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                     in_process_workers: None) -> None:
    out = tmp_path / "cmp"
    argv = ["compare", "--estimators", "sign,dr_grpo", "--seeds", "1", "--group-sizes", "2", "--workers", "2",
            "--out", str(out), "--no-report", "--lrs", "1e-3", "--vary", "max_grad_norm=0,1", *TINY_FLAGS]
    assert main(argv) == 0
    results = pd.read_parquet(out / "results.parquet")
    assert sorted(results["run_id"].unique()) == [f"{e}-G2-seed0-max_grad_norm={v}" for e in ("dr_grpo", "sign")
                                                  for v in (0, 1)]
    assert set(results["variant"]) == {"max_grad_norm=0", "max_grad_norm=1"}
    for name in ("metrics.parquet",):
        assert set(pd.read_parquet(out / name)["variant"]) == {"max_grad_norm=0", "max_grad_norm=1"}
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["variant"]) == ["max_grad_norm=0"] * 2 + ["max_grad_norm=1"] * 2
    for run in out.glob("runs/*"):
        saved = yaml.safe_load((run / "config.yaml").read_text())
        assert saved["max_grad_norm"] == float(run.name[-1])
    assert len(list((out / "start-evals").glob("*.json"))) == 1  # a training setting varied: one start evaluation
    settings = yaml.safe_load((out / "compare.yaml").read_text())
    assert settings["vary"] == "max_grad_norm=0,1" and settings["primary"] == "sign,dr_grpo"
    capsys.readouterr()
    assert main([*argv[:-len(TINY_FLAGS)], "--vary", "seed=1,2", *TINY_FLAGS]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "seed cannot be an axis" in err and "--seeds" in err, err
    assert main([*argv, "--primary", "sign,grpo"]) == 2
    assert "primary must name two different estimators" in capsys.readouterr().err


def test_a_diverged_selection_run_disqualifies_its_lr_and_is_never_retried(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch,
        in_process_workers: None) -> None:
    """The lr 3e-3 run diverges at step 3, forced (``tests/reliability/_diverge.py``): a large lr diverged on one
    CPU and trained on another. The runs train in this process (``in_process_workers``): what is tested is how
    the sweep treats a diverged run, not the workers."""
    out = tmp_path / "cmp"
    argv = ["compare", "--estimators", "sign", "--seeds", "1", "--group-sizes", "2", "--workers", "2",
            "--selection-seeds", "1", "--lrs", "1e-3,3e-3", "--lr-bracket-rounds", "0", "--out", str(out),
            "--no-report", *TINY_FLAGS, "--steps", "8", "--prompts-per-step", "2"]
    force_divergence(monkeypatch, 3e-3, 3)
    assert main(argv) == 1  # a run of the sweep diverged: not ok
    stderr = capsys.readouterr().err
    said = stderr.replace("\n", " ")
    assert "run sign-G2-lr0.003-seed1000 failed" in said and "diverged at step 3" in said, said
    summary = out / "selection" / "sign-G2-lr0.003-seed1000" / "summary.json"
    assert json.loads(summary.read_text())["status"] == "diverged"
    selection = pd.read_parquet(out / "selection.parquet").set_index("lr")
    assert selection.loc[3e-3, "status"] == "diverged" and not selection.loc[3e-3, "selected"]
    assert np.isnan(selection.loc[3e-3, "validation_score"])  # never scored as 0%
    assert selection.loc[1e-3, "selected"] and selection.loc[1e-3, "status"] == "finished"
    assert set(pd.read_parquet(out / "results.parquet")["lr"]) == {1e-3}
    written = summary.stat().st_mtime_ns
    assert main(argv) == 0, capsys.readouterr().err[-2000:]  # the re-run trains nothing: a diverged run has ended
    assert summary.stat().st_mtime_ns == written and "0 run(s) trained" in capsys.readouterr().err


def test_runs_stopped_for_no_signal_are_counted_and_their_arm_flagged(tmp_path: Path,
                                                                       in_process_workers: None) -> None:
    data = tmp_path / "q.jsonl"  # digit prompts, letter answers: the embedded model is always wrong
    data.write_text("".join(json.dumps({"question": f"{i:03d}{i % 7}+=", "answer": "abc"}) + "\n" for i in range(40)))
    out = tmp_path / "cmp"
    assert main(["compare", "--estimators", "sign,dr_grpo", "--seeds", "2", "--group-sizes", "2", "--out", str(out),
                 "--task", "file", "--data", str(data), "--prompt-column", "question", "--reference-column",
                 "answer", "--verifier", "exact", "--task-options", '{"max_new_tokens": 8}', "--stop-when-dead",
                 *ONE_LR, *TINY_FLAGS, "--steps", "5"]) == 0
    results = pd.read_parquet(out / "results.parquet")
    ends = results[results["phase"] == "end"]
    assert len(ends) == 4 and set(ends["status"]) == {"no_signal"} and set(ends["step"]) == {3}
    report = (out / "report.md").read_text()
    for estimator in ("sign", "dr_grpo"):
        assert f"{estimator} G = 2: 2 of 2 runs stopped with no learning signal at step 3" in report
    assert "## Each prompt's fate" in report and set(ends["fate_escaped"]) == {0.0}
