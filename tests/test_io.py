"""grpolab.io: atomic writes, one-line write errors, paths kept inside a folder."""

from __future__ import annotations

import errno
import os

import pytest

from grpolab.errors import UserError
from grpolab.io import atomic_write_text, check_output_file, check_output_folder, inside, write_error

pytestmark = pytest.mark.fast


def test_atomic_write_replaces_the_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_full_disk_keeps_the_old_file_and_gives_one_line(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UserError) as caught:
        atomic_write_text(target, "new")
    assert "disk full" in str(caught.value) and "\n" not in str(caught.value)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_safetensors_error_is_named_as_disk_full():
    error = type("SafetensorError", (Exception,), {})("Error while serializing: IoError(Os { code: 28, kind: "
                                                         "StorageFull, message: \"No space left on device\" })")
    assert str(write_error("x/final", error)).startswith("cannot write x/final (disk full)")


@pytest.mark.parametrize(("error", "said"), [
    (OSError(errno.EFBIG, os.strerror(errno.EFBIG)), "(file too large); raise the file-size limit (ulimit -f)"),
    (OSError(errno.EACCES, os.strerror(errno.EACCES)), "(permission denied); give this user access to it"),
    (OSError(errno.EROFS, os.strerror(errno.EROFS)), "(read-only file system); write to a folder on a writable"),
    (type("SafetensorError", (Exception,), {})("IoError(Os { code: 27, message: \"File too large\" })"),
     "(file too large); raise the file-size limit"),
    (OSError(errno.EIO, os.strerror(errno.EIO)), "(Input/output error); check the folder, then rerun"),
])
def test_each_write_fault_gets_its_own_remedy(error: BaseException, said: str) -> None:
    """Was: "free disk space" for a file-size limit (ulimit -f), and the same words for every other fault."""
    line = str(write_error("run/metrics.jsonl", error, then="rerun with --resume"))
    assert line.startswith("cannot write run/metrics.jsonl ") and said in line and line.endswith("--resume")
    assert "disk space" not in line


@pytest.mark.parametrize("relative", ["/etc", "../x", "a/../../x", ""])
def test_inside_refuses_paths_that_leave_the_folder(tmp_path, relative):
    with pytest.raises(UserError, match="does not name a place inside"):
        inside(tmp_path, relative)


def test_inside_refuses_a_symlink_out_of_the_folder(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "escape").symlink_to(tmp_path.parent)
    with pytest.raises(UserError, match="symlink"):
        inside(tmp_path / "runs", "escape")
    assert inside(tmp_path / "runs", "run-1") == tmp_path / "runs" / "run-1"


def test_the_atomic_writers_refuse_a_symlink_and_leave_its_target_alone(tmp_path):
    from grpolab.io import atomic_write_bytes, atomic_write_with

    target = tmp_path / "outside.txt"
    target.write_text("the user's")
    for name, write in [("a.txt", lambda p: atomic_write_text(p, "new")),
                        ("b.bin", lambda p: atomic_write_bytes(p, b"new")),
                        ("c.csv", lambda p: atomic_write_with(p, lambda staging: staging.write_text("x")))]:
        link = tmp_path / name
        link.symlink_to(target)
        with pytest.raises(UserError, match=rf"{link} is a symbolic link.*remove the link"):
            write(link)
        assert link.is_symlink() and target.read_text() == "the user's"


def test_open_no_follow_appends_and_refuses_a_link_in_one_line(tmp_path):
    from grpolab.io import open_no_follow, refuse_links

    log = tmp_path / "log.jsonl"
    for _ in range(2):
        with open_no_follow(log) as handle:
            handle.write("x\n")
    assert log.read_text() == "x\nx\n"
    target = tmp_path / "outside"
    target.write_text("")
    (tmp_path / "link").symlink_to(target)
    for mode in "aw":
        with pytest.raises(UserError, match="is a symbolic link") as caught:
            open_no_follow(tmp_path / "link", mode)
        assert "\n" not in str(caught.value)
    assert target.read_text() == ""
    refuse_links(tmp_path, ["log.jsonl", "missing"])  # no link: nothing said
    with pytest.raises(UserError, match="link is a symbolic link"):
        refuse_links(tmp_path, ["log.jsonl", "link"])


def test_atomic_write_with_a_writer_that_fails_keeps_the_old_table(tmp_path):
    import pandas as pd

    from grpolab.sweep.gather import write_table

    path = tmp_path / "results.parquet"
    write_table(path, pd.DataFrame({"a": [1, 2]}))

    def full(staging):
        staging.write_bytes(b"PAR1 torn")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    from grpolab.io import atomic_write_with

    with pytest.raises(UserError, match="disk full"):
        atomic_write_with(path, full)
    assert pd.read_parquet(path)["a"].tolist() == [1, 2]  # before: to_parquet wrote in place, leaving it torn
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.parquet"]
    write_table(tmp_path / "runs.csv", pd.DataFrame({"a": [3]}))
    assert (tmp_path / "runs.csv").read_text() == "a\n3\n"


@pytest.mark.parametrize("name", [".grpolab.lock.owner", ".grpolab.lock"])
def test_a_directory_lock_refuses_a_planted_link_and_writes_nothing_through_it(tmp_path, name):
    from grpolab.train.lock import DirectoryLock

    target = tmp_path / "outside"
    target.write_text("the user's")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / name).symlink_to(target)
    lock = DirectoryLock(tmp_path / "run", "test")
    with pytest.raises(UserError, match="is a symbolic link"):
        lock.acquire()
    assert target.read_text() == "the user's" and not lock.held  # before: the owner's pid written to the target


def test_an_atomic_write_gives_the_mode_a_plain_write_would(tmp_path):
    plain, atomic = tmp_path / "plain.txt", tmp_path / "atomic.txt"
    plain.write_text("x")
    atomic_write_text(atomic, "x")  # before: 0600 (mkstemp's), so a shared results folder was unreadable to others
    assert atomic.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    atomic.chmod(0o640)
    atomic_write_text(atomic, "y")
    assert atomic.stat().st_mode & 0o777 == 0o640  # a file's own mode is kept


def _no_permission(monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating a file fails as it does for a user without write permission (the tests may run as root)."""
    real_open = os.open

    def refuse(path, flags, *args):
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)


def test_an_output_folder_is_made_probed_and_left_clean(tmp_path):
    folder = check_output_folder(tmp_path / "a" / "b")
    assert folder.is_dir() and list(folder.iterdir()) == []


@pytest.mark.parametrize("check", [check_output_folder, check_output_file])
def test_an_output_that_cannot_be_written_is_one_line_naming_the_flag(tmp_path, monkeypatch, check):
    _no_permission(monkeypatch)
    with pytest.raises(UserError) as caught:
        check(tmp_path / "x", flag="--html")
    line = str(caught.value)
    assert "--html" in line and "(permission denied)" in line and "choose another --html" in line
    assert "\n" not in line and not (tmp_path / "x").is_file()
    assert not (tmp_path / "x").exists() or list((tmp_path / "x").iterdir()) == []


def test_an_output_file_is_refused_when_it_is_a_folder_or_its_folder_is_not_there(tmp_path):
    (tmp_path / "a-file").write_text("")
    for path, said in [(tmp_path, "is a folder; give a file name"),
                       (tmp_path / "missing" / "r.json", "missing does not exist"),
                       (tmp_path / "a-file" / "r.json", "a-file is a file, not a folder")]:
        with pytest.raises(UserError, match=said):
            check_output_file(path)
    assert check_output_file(tmp_path / "r.json") == tmp_path / "r.json" and not (tmp_path / "r.json").exists()


def test_an_output_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "a-file").write_text("kept")
    with pytest.raises(UserError, match="a-file is a file; choose a folder"):
        check_output_folder(tmp_path / "a-file")
    assert (tmp_path / "a-file").read_text() == "kept"
