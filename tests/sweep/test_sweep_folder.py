"""``grpolab compare``'s --out folder (issue 35, items 3 and 5): changed data is refused once runs trained, a start
evaluation cached on other data is never read, a user's files are never overwritten, and --overwrite (library:
``compare(..., overwrite=True)``) replaces only an earlier comparison's own files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.config import CompareConfig, TrainConfig
from grpolab.errors import UserError
from grpolab.sweep import compare
from grpolab.sweep.plan import plan_runs
from sweep_runs import finish

SWEEP = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4", workers=1)
ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]


def _data(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _finished_sweep(out: Path, base: TrainConfig) -> None:
    for spec in plan_runs(base, ["sign"], [0], [2], out):
        finish(spec, 0.5)


def _file_base(tmp_path: Path) -> TrainConfig:
    data = _data(tmp_path / "qa.jsonl", ROWS)
    return TrainConfig(steps=2, task="file", data=str(data), verifier="exact")


def test_a_sweep_refuses_data_that_changed_since_its_runs_trained(tmp_path: Path) -> None:
    base = _file_base(tmp_path)
    out = tmp_path / "out"
    _finished_sweep(out, base)
    with pytest.warns(UserWarning):
        compare(SWEEP, base, out, report=False)
    _data(Path(base.data), [*ROWS[:-1], {"prompt": "9+9=", "answer": "19"}])
    with pytest.raises(UserError, match=rf"the data {base.data} changed since the runs in {out} trained") as caught:
        compare(SWEEP, base, out, report=False)  # before: the old runs gathered as the result on new data, exit 0
    assert "\n" not in str(caught.value)


def test_a_start_evaluation_cached_on_other_data_is_never_read(tmp_path: Path) -> None:
    base = _file_base(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(UserError, match="no run finished"):  # a sweep whose runs have not trained yet
        _no_training(SWEEP, base, out)
    stale = out / "start-evals" / "0123456789abcdef0123.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps({"greedy_accuracy": 0.429}))  # a start evaluated on this data
    with pytest.raises(UserError, match="no run finished"):
        _no_training(SWEEP, base, out)
    assert stale.exists()  # the same data: kept
    _data(Path(base.data), ROWS[:50])  # the data changed before any run trained
    with pytest.warns(UserWarning, match=r"held 1 start evaluation\(s\) made on other data"):
        with pytest.raises(UserError, match="no run finished"):
            _no_training(SWEEP, base, out)
    assert not stale.exists()  # before: read as the start of every run at that seed ("42.9% -> 0.0%")
    assert json.loads((out / "identity.json").read_text())["data"]


def _no_training(sweep: CompareConfig, base: TrainConfig, out: Path) -> None:
    """compare() with the backend replaced by one that trains nothing (every run 'fails' at once)."""
    import grpolab.sweep.comparison as comparison

    real = comparison.run_sweep
    comparison.run_sweep = lambda specs, **kwargs: [{"run_id": s.run_id, "ok": False, "error": "x", "seconds": 0}
                                                    for s in specs]
    try:
        compare(sweep, base, out, report=False)
    finally:
        comparison.run_sweep = real


@pytest.mark.parametrize("name", ["report.md", "runs.csv", "figures/summary.png", "notes.txt"])
def test_compare_refuses_a_folder_with_the_users_files(tmp_path: Path, name: str) -> None:
    out = tmp_path / "mine"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text("the user's")
    with pytest.raises(UserError, match=rf"{out} holds files grpolab compare did not write \({name}\)"):
        compare(SWEEP, TrainConfig(steps=2), out, report=False)  # before: overwrote report.md, runs.csv, figures
    assert (out / name).read_text() == "the user's"
    if name in ("report.md", "runs.csv"):
        with pytest.raises(UserError, match="at names it writes"):
            compare(SWEEP, TrainConfig(steps=2), out, report=False, overwrite=True)
        assert (out / name).read_text() == "the user's"


def test_overwrite_replaces_an_earlier_comparison_and_keeps_the_users_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _finished_sweep(out, base)
    compare(SWEEP, base, out, report=False)
    (out / "notes.txt").write_text("mine")
    (out / "runs" / "sign-G2-seed0" / "my-plot.png").write_text("mine")
    with pytest.raises(UserError, match=r"did not write \(notes.txt\)"):
        compare(SWEEP, base, out, report=False)
    with pytest.raises(UserError, match="no run finished"):
        _no_training_overwrite(out, base)
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "runs" / "sign-G2-seed0" / "my-plot.png").read_text() == "mine"
    assert not (out / "runs" / "sign-G2-seed0" / "eval.jsonl").exists()  # the earlier run's own files are gone


def _no_training_overwrite(out: Path, base: TrainConfig) -> None:
    import grpolab.sweep.comparison as comparison

    real = comparison.run_sweep
    comparison.run_sweep = lambda specs, **kwargs: []
    try:
        compare(SWEEP, base, out, report=False, overwrite=True)
    finally:
        comparison.run_sweep = real


def test_a_rerun_on_its_own_folder_is_not_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _finished_sweep(out, base)
    for _ in range(2):
        result = compare(SWEEP, base, out, report=True)
    assert not result.failed and (out / "report.md").is_file() and (out / "runs.csv").is_file()


def test_the_cli_refuses_a_folder_of_the_users_files_in_one_line(tmp_path: Path, capsys) -> None:
    from grpolab.cli import main

    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("the user's")
    argv = ["compare", "--out", str(out), "--estimators", "sign", "--seeds", "1", "--group-sizes", "2", "--steps", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not write (report.md)" in err[0] and "--overwrite" in err[0]
    assert main([*argv, "--overwrite"]) == 2  # a user's file at a name compare writes: refused even then
    assert "at names it writes" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "the user's"


def test_a_sweep_refuses_a_task_whose_problems_changed_since_its_runs_trained(tmp_path: Path) -> None:
    """Data no local path names (the hub cache, a generated task) is checked through the splits' hash."""
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _finished_sweep(out, base)
    compare(SWEEP, base, out, report=False)
    identity = json.loads((out / "identity.json").read_text())
    assert len(identity["splits"]) == 64
    (out / "identity.json").write_text(json.dumps({**identity, "splits": "0" * 64}))  # made on other problems
    with pytest.raises(UserError, match=r"the problems of task 'reverse' .* changed since the runs in"):
        compare(SWEEP, base, out, report=False)


def test_the_splits_hash_follows_every_problem_and_nothing_else() -> None:
    from dataclasses import replace

    from grpolab.tasks import get_task
    from grpolab.tasks.base import splits_hash

    task = get_task("arith")
    assert splits_hash(task) == splits_hash(get_task("arith")) == task.summary()["data_sha256"]
    changed = replace(task, test=(replace(task.test[0], reference=task.test[0].reference + "0"), *task.test[1:]))
    assert splits_hash(changed) != splits_hash(task)
    assert splits_hash(replace(task, verifier="exact")) == splits_hash(task)  # settings are checked elsewhere


@pytest.mark.parametrize("name", ["runs.csv", "results.parquet", ".grpolab.lock.owner", "runs", "runs/sign-G2-seed0"])
def test_compare_never_writes_through_a_planted_symlink(tmp_path: Path, name: str) -> None:
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _finished_sweep(out, base)
    compare(SWEEP, base, out, report=False)
    target = tmp_path / "outside"
    target.mkdir() if name.startswith("runs") else target.write_text("the user's")
    before = sorted(p.name for p in target.iterdir()) if target.is_dir() else target.read_text()
    path = out / name
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()
    path.symlink_to(target)
    with pytest.raises(UserError, match=rf"{path} is a symbolic link"):
        compare(SWEEP, base, out, report=False)  # before: the tables and lock owner written to the link's target
    assert (sorted(p.name for p in target.iterdir()) if target.is_dir() else target.read_text()) == before


def test_overwrite_keeps_the_users_files_under_figures_start_evals_and_mechanism(tmp_path: Path) -> None:
    """Only the figures the earlier report links, start evaluations by their key names and mechanism's own files
    are deleted (before: every ``figures/*.png``, ``start-evals/*.json`` and ``mechanism/*/mechanism*.csv``)."""
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _finished_sweep(out, base)
    compare(SWEEP, base, out, report=True)
    ours = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert ours  # the report wrote figures
    mine = {"figures/my_plot.png": "png", "start-evals/notes.json": "{}", "mechanism/v/mechanism_notes.csv": "a",
            "mechanism/notes.txt": "n"}
    for name, text in mine.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    (out / "start-evals" / "0123456789abcdef0123.json").write_text("{}")  # a start evaluation the sweep cached
    with pytest.raises(UserError, match="no run finished"):
        _no_training_overwrite(out, base)
    assert {name: (out / name).read_text() for name in mine} == mine
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["my_plot.png"]
    assert not (out / "start-evals" / "0123456789abcdef0123.json").exists()


SWEEP_TWO_SEEDS = CompareConfig(estimators="sign", seeds=2, group_sizes="2", lrs="1e-4", workers=1)


def _finished_two_seed_sweep(out: Path, base: TrainConfig) -> list[Path]:
    specs = plan_runs(base, ["sign"], [0, 1], [2], out)
    for spec in specs:
        finish(spec, 0.5)
    compare(SWEEP_TWO_SEEDS, base, out, report=False)
    return [spec.run_dir for spec in specs]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(".grpolab.lock")}


def test_overwrite_checks_every_run_before_deleting_any(tmp_path: Path) -> None:
    """A user's file inside the second run's ``final/`` is refused before the first run is deleted (before: the
    first run was gone when the refusal came)."""
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _, second = _finished_two_seed_sweep(out, base)
    (second / "final").mkdir()
    (second / "final" / "notes.txt").write_text("mine")
    before = _files(out)
    with pytest.raises(UserError, match=r"final/notes\.txt.*move them out") as caught:
        _no_training_overwrite(out, base)
    assert "\n" not in str(caught.value)
    assert _files(out) == before


def test_overwrite_refuses_a_run_a_live_train_process_is_writing(tmp_path: Path) -> None:
    """A run whose lock a live process holds is refused in one line naming it, and nothing is deleted (before: the
    run, lock included, was deleted under the training process, which then died told to free disk space)."""
    out = tmp_path / "out"
    base = TrainConfig(steps=2)
    _, second = _finished_two_seed_sweep(out, base)
    hold = (f"import time\nfrom grpolab.train.lock import DirectoryLock\nlock = DirectoryLock({str(second)!r}, 'train')"
            ".acquire()\nprint('held', flush=True)\ntime.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _files(out)
        with pytest.raises(UserError, match=rf"{second} is in use by another grpolab process \(pid {holder.pid}"):
            _no_training_overwrite(out, base)
        assert _files(out) == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("damage", ["missing", "not json", "not an object"])
def test_a_trained_sweep_without_its_identity_is_refused_not_started_afresh(tmp_path: Path, damage: str) -> None:
    """Changed data with ``identity.json`` deleted or damaged (before: the new data recorded as the runs' own, and
    the old runs gathered beside new ones without a word)."""
    base = _file_base(tmp_path)
    out = tmp_path / "out"
    _finished_sweep(out, base)
    with pytest.warns(UserWarning):
        compare(SWEEP, base, out, report=False)
    _data(Path(base.data), [*ROWS[:-1], {"prompt": "9+9=", "answer": "19"}])
    path = out / "identity.json"
    if damage == "missing":
        path.unlink()
    else:
        path.write_text("{oops" if damage == "not json" else "[1, 2]")
    with pytest.raises(UserError, match=rf"{path} is {'missing' if damage == 'missing' else 'damaged'}") as caught:
        compare(SWEEP, base, out, report=False)
    assert "restore" in str(caught.value) and "new --out" in str(caught.value) and "\n" not in str(caught.value)
    assert not path.exists() or path.read_text() in ("{oops", "[1, 2]")  # nothing recorded in its place


def test_data_edited_while_a_sweep_runs_is_refused_naming_the_runs_on_the_new_data(
        tmp_path: Path, in_process_workers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # was: 3 runs trained on the old file and 1 on the new were gathered as one comparison, exit 0
    import grpolab.sweep.local as local

    base = _file_base(tmp_path).replace(prompts_per_step=2, eval_limit=2, eval_samples=0, max_new_tokens=4,
                                        eval_start=False, threads=1)
    trained = local.post_progress

    def edit_after_the_first_run(spec):  # the user edits the data while the sweep runs
        outcome = trained(spec)
        _data(Path(base.data), [*ROWS[:-1], {"prompt": "9+9=", "answer": "19"}])
        return outcome

    monkeypatch.setattr(local, "post_progress", edit_after_the_first_run)
    out = tmp_path / "out"
    sweep = CompareConfig(estimators="sign", seeds=2, group_sizes="2", lrs="1e-4", workers=1)
    with pytest.raises(UserError, match=r"changed while the sweep .* ran: run\(s\) sign-G2-seed1 trained on other "
                                        "data") as caught:
        compare(sweep, base, out, report=False)
    assert "\n" not in str(caught.value) and "seed0" not in str(caught.value)
    assert not (out / "results.parquet").exists()
