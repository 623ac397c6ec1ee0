"""``grpolab.provenance``: the version, the commit of the checkout grpolab runs from, and the source digest that
names the code where the commit cannot; the digest of a commit's files read from git equals that of the same files
on disk, and a digest finds its commit."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grpolab import __version__, provenance

SOURCE = Path(provenance.__file__).resolve().parent


def test_the_version_and_the_checkouts_commit() -> None:
    provenance.software.cache_clear()  # read now: a commit made since an earlier call moved HEAD
    record = provenance.software()
    assert record["version"] == __version__
    done = subprocess.run(["git", "-C", str(SOURCE), "rev-parse", "HEAD"], capture_output=True, text=True)
    if done.returncode == 0:  # a checkout (this suite's case in CI): its HEAD, and a dirty flag
        assert record["commit"] == done.stdout.strip() and re.fullmatch(r"[0-9a-f]{40}", record["commit"])
        assert isinstance(record["dirty"], bool)
    else:
        assert record["commit"] is None and record["dirty"] is None


def test_no_git_gives_no_commit(monkeypatch) -> None:
    monkeypatch.setattr(provenance, "_git", lambda *args: None)
    provenance.software.cache_clear()
    try:
        record = provenance.software()
        assert record == {"version": __version__, "commit": None, "dirty": None, "source": provenance.source_digest()}
    finally:
        provenance.software.cache_clear()


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_digest_follows_every_python_file_and_nothing_else(tmp_path: Path) -> None:
    files = {"__init__.py": "x = 1\n", "a/b.py": "y = 2\n"}
    first = provenance.source_digest(_package(tmp_path / "one", files))
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert provenance.source_digest(_package(tmp_path / "two", files)) == first  # the same files, elsewhere
    extra = _package(tmp_path / "three", {**files, "notes.txt": "text", "a/__pycache__/b.cpython-311.py": "z"})
    assert provenance.source_digest(extra) == first  # other files and caches are not code
    assert provenance.source_digest(_package(tmp_path / "four", {**files, "a/b.py": "y = 3\n"})) != first
    assert provenance.source_digest(_package(tmp_path / "five", {"__init__.py": "x = 1\n", "a/c.py": "y = 2\n"})) \
        != first  # a file renamed


def test_a_commits_digest_is_that_of_its_files_and_finds_the_commit(tmp_path: Path, monkeypatch) -> None:
    if shutil.which("git") is None:
        pytest.skip("no git")
    package = _package(tmp_path / "repo" / "src" / "pkg", {"__init__.py": "x = 1\n", "a/b.py": "y = 2\n"})
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "first")
    first = git("rev-parse", "HEAD")
    (repo / "README").write_text("docs only")
    git("add", "-A")
    git("commit", "-qm", "docs")
    (package / "a" / "b.py").write_text("y = 3\n")
    git("add", "-A")
    git("commit", "-qm", "code")
    monkeypatch.setattr(provenance, "_SOURCE", package)
    assert provenance.commit_source_digest("HEAD") == provenance.source_digest(package)
    old = provenance.commit_source_digest(first)
    assert old != provenance.source_digest(package)
    assert provenance.commits_with_source(old) == [git("rev-parse", "HEAD~1"), first]  # newest first
    assert provenance.commits_with_source(old[:8]) == [git("rev-parse", "HEAD~1"), first]
    assert provenance.commits_with_source("0" * 64) == []
    with pytest.raises(ValueError, match="too short"):
        provenance.commits_with_source("abc")
    assert provenance.main([old[:12]]) == 0 and provenance.main(["0" * 12]) == 1


def test_describe_names_the_source_where_the_commit_does_not(monkeypatch) -> None:
    clean = {"version": "1.0", "commit": "a" * 40, "dirty": False, "source": "b" * 64}
    assert provenance.describe(clean) == f"1.0, commit {'a' * 12}"
    assert provenance.describe({**clean, "dirty": True}) == f"1.0, commit {'a' * 12} with uncommitted changes, " \
        f"source {'b' * 12}"
    assert provenance.describe({**clean, "commit": None, "dirty": None}) == f"1.0, source {'b' * 12}"
    assert provenance.describe({"version": "1.0", "commit": None, "dirty": None}) == "1.0"  # a record from before


def test_a_repository_that_does_not_track_grpolab_names_no_commit(tmp_path: Path, monkeypatch) -> None:
    """grpolab installed into a virtual environment inside a user's own repository: that repository's HEAD is not
    grpolab's commit."""
    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "project"
    (repo / "train.py").parent.mkdir()
    (repo / "train.py").write_text("print(1)\n")
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    installed = _package(repo / ".venv" / "site-packages" / "grpolab", {"__init__.py": "x = 1\n"})
    monkeypatch.setattr(provenance, "_SOURCE", installed)
    provenance.software.cache_clear()
    try:
        record = provenance.software()
    finally:
        provenance.software.cache_clear()
    assert record["commit"] is None and record["dirty"] is None
    assert record["source"] == provenance.source_digest(installed)
