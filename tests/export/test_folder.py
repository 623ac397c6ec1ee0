"""``--out``: refused when it holds something, replaced only when it holds an earlier export, written whole or not
at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpolab.errors import UserError
from grpolab.export import export
from grpolab.export.folder import check_out, staged

pytestmark = pytest.mark.fast


def _model_files(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "README.md"):
        (folder / name).write_text("old")
    return folder


def test_a_missing_or_empty_out_is_taken(tmp_path: Path) -> None:
    check_out(tmp_path / "new", overwrite=False)
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty", overwrite=False)


def test_an_out_that_holds_files_needs_overwrite(tmp_path: Path) -> None:
    out = _model_files(tmp_path / "out")
    with pytest.raises(UserError, match="exists and is not empty; choose a new --out, or pass --overwrite"):
        check_out(out, overwrite=False)
    check_out(out, overwrite=True)
    _model_files(tmp_path / "cmp" / "sign-G4-seed0")  # a compare directory's export: one folder per run
    check_out(tmp_path / "cmp", overwrite=True)


@pytest.mark.parametrize("foreign", ["notes.txt", "sub/deeper/x.json", "sign-G4-seed0/notes.txt"])
def test_overwrite_never_deletes_files_an_export_does_not_write(foreign: str, tmp_path: Path) -> None:
    out = _model_files(tmp_path / "out")
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("mine")
    with pytest.raises(UserError, match="holds files an export does not write"):
        check_out(out, overwrite=True)


def test_a_link_or_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        check_out(tmp_path / "file", overwrite=True)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="symbolic link"):
        check_out(tmp_path / "link", overwrite=True)


def test_staged_replaces_out_only_once_the_block_ends(tmp_path: Path) -> None:
    out = _model_files(tmp_path / "out")
    with staged(out) as staging:
        (staging / "config.json").write_text("new")
        assert (out / "config.json").read_text() == "old"  # the old folder stays whole until the end
    assert sorted(p.name for p in out.iterdir()) == ["config.json"] and (out / "config.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or old folder left beside it


def test_an_interrupted_export_leaves_no_folder(full_run: Path, tmp_path: Path) -> None:
    def interrupt(exported) -> None:
        assert not (tmp_path / "out").exists()  # written so far into the staging folder beside it only
        assert [p.name.startswith(".out.export-") for p in tmp_path.iterdir()] == [True]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        export(full_run, tmp_path / "out", on_run=interrupt)
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_a_full_out_and_replaces_an_earlier_export(full_run: Path, tmp_path: Path) -> None:
    out = _model_files(tmp_path / "out")
    with pytest.raises(UserError, match="not empty"):
        export(full_run, out)
    assert (out / "config.json").read_text() == "old"
    export(full_run, out, overwrite=True)
    assert (out / "config.json").read_text() != "old" and (out / "tokenizer.json").is_file()


def test_out_inside_the_run_is_refused(full_run: Path) -> None:
    with pytest.raises(UserError, match="inside a run it exports"):
        export(full_run, full_run / "export")
    assert not (full_run / "export").exists()
