"""A fresh ``grpolab train`` never destroys data: a folder holding a finished run (even without its
checkpoints), an earlier run's logs or files grpolab did not write is refused without --overwrite, and
--overwrite deletes only the files a run writes."""

from __future__ import annotations

import shutil

import pytest
from tests.reliability.conftest import RUN_FLAGS, assert_one_line_error, run_cli

from grpolab.errors import UserError
from grpolab.io import open_no_follow
from grpolab.train import runlog


def _snapshot(folder):
    """Every file's bytes, but the lock files a refused process leaves (they hold only its pid)."""
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.name.startswith(".grpolab.lock")}


def test_train_into_a_finished_run_without_checkpoints_is_refused(finished_run, capsys):
    shutil.rmtree(finished_run / "checkpoints")
    before = _snapshot(finished_run)
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "holds a finished (or diverged) run", "--overwrite", "new --out")
    assert _snapshot(finished_run) == before


def test_train_into_a_folder_of_the_users_files_is_refused(tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "rollouts").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"step": 1, "my": "numbers"}\n')
    (out / "config.yaml").write_text("my: settings\n")
    (out / "rollouts" / "mine.parquet").write_bytes(b"PAR1")
    before = _snapshot(out)
    code, err = run_cli(["train", "--out", str(out), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "files grpolab did not write", "config.yaml", "rollouts/mine.parquet")
    assert _snapshot(out) == before


def test_resume_into_a_folder_with_nothing_to_resume_is_checked_as_a_fresh_run(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "my": "numbers"}\n')
    code, err = run_cli(["train", "--out", str(out), "--resume", *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "files grpolab did not write (metrics.jsonl)", "--overwrite")
    assert (out / "metrics.jsonl").read_text() == '{"step": 1, "my": "numbers"}\n'


def test_overwrite_never_deletes_the_users_own_logs_after_promising_to_keep_them(tmp_path, capsys):
    """The user's own metrics.jsonl, task.json and summary.json (no run's config.yaml or checkpoint beside them)
    are named as theirs, and --overwrite refuses them rather than delete them (before: the refusal promised
    "files grpolab did not write are kept", then --overwrite deleted all three)."""
    out = tmp_path / "mine"
    out.mkdir()
    mine = {"metrics.jsonl": '{"step": 1, "my": "numbers"}\n', "task.json": "{}", "summary.json": '{"mine": 1}'}
    for name, text in mine.items():
        (out / name).write_text(text)
    code, err = run_cli(["train", "--out", str(out), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "files grpolab did not write (metrics.jsonl, summary.json, task.json)",
                          "files grpolab did not write are kept")
    code, err = run_cli(["train", "--out", str(out), *RUN_FLAGS, "--overwrite"], capsys)
    assert_one_line_error(code, err, "at names a run writes (metrics.jsonl, summary.json, task.json)", "move them out")
    assert {name: (out / name).read_text() for name in mine} == mine


def test_overwrite_refuses_or_keeps_the_users_files_in_checkpoints_staging_and_wandb_runs(finished_run, capsys):
    """A user's file inside a TRL checkpoint folder or a checkpoint's staging (folders a run deletes whole when it
    prunes) is refused before anything is deleted; one inside an offline W&B run folder is kept (before: all
    three deleted as grpolab's, by the patterns ``checkpoint-*/*``, ``.tmp-*/*`` and ``run-*/*``)."""
    for name in ("checkpoints/checkpoint-4/notes.txt", "checkpoints/.tmp-abc/notes.txt"):
        (finished_run / name).parent.mkdir(parents=True)
        (finished_run / name).write_text("mine")
        before = _snapshot(finished_run)
        code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS, "--overwrite"], capsys)
        assert_one_line_error(code, err, name, "move them out")
        assert _snapshot(finished_run) == before
        shutil.rmtree((finished_run / name).parent)
    mine = finished_run / "wandb" / "run-20260101_000000-abc" / "my-notes.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    (mine.parent / "run-abc.wandb").write_bytes(b"W&B")  # what W&B itself writes there goes
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS, "--overwrite"], capsys)
    assert code == 0, err
    assert mine.read_text() == "mine" and not (mine.parent / "run-abc.wandb").exists()


def test_overwrite_replaces_the_run_and_keeps_the_users_files(finished_run, capsys):
    (finished_run / "notes.txt").write_text("mine")
    (finished_run / "rollouts" / "mine.parquet").write_bytes(b"PAR1")
    flags = [f if f != "3e-4" else "1e-3" for f in RUN_FLAGS]
    code, err = run_cli(["train", "--out", str(finished_run), *flags], capsys)
    assert code == 2 and "--overwrite" in err
    code, err = run_cli(["train", "--out", str(finished_run), *flags, "--overwrite"], capsys)
    assert code == 0, err
    assert (finished_run / "notes.txt").read_text() == "mine"
    assert (finished_run / "rollouts" / "mine.parquet").read_bytes() == b"PAR1"
    assert [row["loss/lr"] for row in runlog.read_metrics(finished_run / "metrics.jsonl")] == [1e-3, 1e-3]


def test_the_same_run_stopped_before_its_first_checkpoint_starts_again(finished_run, capsys):
    shutil.rmtree(finished_run / "checkpoints")
    shutil.rmtree(finished_run / "final")
    (finished_run / "summary.json").unlink()
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS], capsys)
    assert code == 0, err
    assert [row["step"] for row in runlog.read_metrics(finished_run / "metrics.jsonl")] == [1, 2]
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "already holds a run", "--resume")


def test_overwrite_deletes_only_what_grpolab_wrote_at_every_depth(finished_run, capsys):
    mine = {"checkpoints/README.txt": "my notes", "tensorboard/my_plot.png": "png", "wandb/notes.md": "w"}
    for name, text in mine.items():
        (finished_run / name).parent.mkdir(exist_ok=True)
        (finished_run / name).write_text(text)
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS, "--overwrite"], capsys)
    assert code == 0, err
    for name, text in mine.items():  # before: checkpoints/, tensorboard/ and wandb/ deleted whole
        assert (finished_run / name).read_text() == text, name
    assert sorted(p.name for p in (finished_run / "checkpoints").iterdir()) == \
        ["README.txt", "step-000001", "step-000002"]


def test_overwrite_removes_what_a_killed_write_left(finished_run, capsys):
    (finished_run / ".final.tmp-abc123").mkdir()
    (finished_run / ".final.tmp-abc123" / "model.safetensors").write_bytes(b"half")
    (finished_run / "metrics.jsonl.tmp").write_text('{"step": 1')
    (finished_run / ".summary.json.k3x9q_1.tmp").write_text('{"status"')
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS, "--overwrite"], capsys)
    assert code == 0, err
    assert not (finished_run / ".final.tmp-abc123").exists() and not (finished_run / "metrics.jsonl.tmp").exists()
    assert not (finished_run / ".summary.json.k3x9q_1.tmp").exists()


def test_a_run_killed_while_writing_its_config_starts_again(tmp_path, capsys):
    """kill -9 during the atomic write of config.yaml leaves its staging file (``.config.yaml.<random>.tmp``):
    the same command starts the run again (it was refused as a file grpolab did not write)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / ".config.yaml.a1b2c3d4.tmp").write_text("# grpolab settings, schema 1\nadvan")
    code, err = run_cli(["train", "--out", str(out), *RUN_FLAGS], capsys)
    assert code == 0, err
    assert (out / "summary.json").is_file()
    (out / ".notes.tmp").write_text("mine")  # a name no grpolab write uses is still the user's
    code, err = run_cli(["train", "--out", str(out), *RUN_FLAGS, "--overwrite"], capsys)
    assert code == 0 and (out / ".notes.tmp").read_text() == "mine"


def test_overwrite_refuses_a_users_file_inside_a_folder_a_run_replaces_whole(finished_run, capsys):
    (finished_run / "final" / "notes.txt").write_text("mine")
    (finished_run / "checkpoints" / "step-000002" / "why.txt").write_text("mine")
    before = _snapshot(finished_run)
    code, err = run_cli(["train", "--out", str(finished_run), *RUN_FLAGS, "--overwrite"], capsys)
    assert_one_line_error(code, err, "final/notes.txt", "checkpoints/step-000002/why.txt", "move them out")
    assert _snapshot(finished_run) == before


def test_a_run_never_writes_through_a_planted_symlink(finished_run, tmp_path, capsys):
    """A link planted at a name a run writes (its lock owner, resumes.jsonl, a log) is refused in one line, and
    its target is untouched (before: a resume appended to the link's target, outside the run)."""
    for name in (".grpolab.lock.owner", "resumes.jsonl", "metrics.jsonl", "eval.jsonl", "summary.json"):
        run = tmp_path / f"run-{name}"
        shutil.copytree(finished_run, run)
        target = tmp_path / f"target-{name}"
        target.write_text("the user's file\n")
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(target)
        code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "3", "--no-progress", "--threads",
                             "1"], capsys)
        assert_one_line_error(code, err, f"{run / name} is a symbolic link", "remove the link")
        assert target.read_text() == "the user's file\n", name



def test_a_run_never_writes_through_a_planted_hard_link(finished_run, tmp_path, capsys):
    """A hard link planted at a name a run opens for writing (its lock, lock owner, resumes.jsonl, a log) is
    refused in one line, and the user's file under its other name is untouched (before: the owner file was
    emptied and rewritten, resumes.jsonl appended to)."""
    for name in (".grpolab.lock", ".grpolab.lock.owner", "resumes.jsonl", "metrics.jsonl", "eval.jsonl"):
        run = tmp_path / f"run-{name}"
        shutil.copytree(finished_run, run)
        target = tmp_path / f"target-{name}"
        target.write_text("the user's file\n")
        (run / name).unlink(missing_ok=True)
        (run / name).hardlink_to(target)
        code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "3", "--no-progress", "--threads",
                             "1"], capsys)
        assert_one_line_error(code, err, f"{run / name} has 2 hard links", "remove it")
        assert target.read_text() == "the user's file\n", name


def test_open_no_follow_refuses_a_hard_link_before_emptying_it(tmp_path):
    target, planted = tmp_path / "target", tmp_path / "planted"
    target.write_text("the user's file\n")
    planted.hardlink_to(target)
    for mode in ("w", "a"):
        with pytest.raises(UserError, match="has 2 hard links"):
            open_no_follow(planted, mode)
    assert target.read_text() == "the user's file\n"
    with open_no_follow(tmp_path / "own", "w") as handle:  # a file of one name is written as before
        handle.write("x")
    assert (tmp_path / "own").read_text() == "x"


def test_the_writable_probe_never_writes_through_a_planted_symlink(finished_run, tmp_path, capsys):
    import os

    target = tmp_path / "outside"
    target.write_text("the user's file\n")
    (finished_run / f".write-test-{os.getpid()}").symlink_to(target)  # the probe's name in this process
    code, err = run_cli(["train", "--out", str(finished_run), "--resume", "--steps", "3", "--no-progress", "--threads",
                         "1"], capsys)
    assert code == 0, err
    assert target.read_text() == "the user's file\n"  # before: emptied by the probe's write_text("")
