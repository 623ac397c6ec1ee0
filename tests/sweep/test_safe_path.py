"""A sweep's spawned workers never import code from the folder ``grpolab compare`` runs in: a spawned worker starts
as ``python -c``, which put the current directory first on ``sys.path``, so a ``multiprocessing/__init__.py`` planted
there ran in every worker (``grpolab.sweep.local``). The sweep runs through ``_cli_from_cwd.py``, which starts as the
``grpolab`` console script does (its own folder, not the current directory, first on ``sys.path``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
TINY = ["--estimators", "sign", "--seeds", "1", "--group-sizes", "2", "--lrs", "", "--lr", "1e-3", "--steps", "1",
        "--prompts-per-step", "2", "--eval-limit", "4", "--eval-samples", "2", "--workers", "1", "--no-report",
        "--no-progress"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH needs Python 3.11")
def test_compare_in_a_folder_holding_a_multiprocessing_package_runs_none_of_it(tmp_path: Path) -> None:
    folder, marker = tmp_path / "folder", tmp_path / "pwned"
    (folder / "multiprocessing").mkdir(parents=True)
    (folder / "multiprocessing" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('ran')\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("PYTHONSAFEPATH", None)
    done = subprocess.run([sys.executable, str(Path(__file__).parent / "_cli_from_cwd.py"), "compare", *TINY,
                           "--out", str(tmp_path / "out")], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    assert not marker.exists(), done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / "results.parquet").is_file()
