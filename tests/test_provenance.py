"""``grpolab.provenance.software``: the version, and the commit of the checkout grpolab runs from."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
        assert provenance.software() == {"version": __version__, "commit": None, "dirty": None}
    finally:
        provenance.software.cache_clear()
