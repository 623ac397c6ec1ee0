"""grpolab.io: atomic writes, one-line write errors, paths kept inside a folder."""

from __future__ import annotations

import errno
import os

import pytest

from grpolab.errors import UserError
from grpolab.io import atomic_write_text, inside, write_error


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
