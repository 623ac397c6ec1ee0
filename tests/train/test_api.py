"""The README's Python example runs as printed (a shorter run: the same calls, fewer steps)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(block for block in blocks if "from grpolab.train import train" in block)
    return example


def test_the_readme_python_example_trains_and_evaluates(tmp_path: Path, monkeypatch, capsys) -> None:
    example = _python_example().replace("steps=30", "steps=2").replace('"runs/sign-py"', repr(str(tmp_path / "run")))
    assert "steps=2" in example and str(tmp_path) in example  # the example still has the shape this test edits
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    exec(compile(example, "README.md", "exec"), {})
    accuracy = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0.0 <= accuracy <= 1.0
    assert (tmp_path / "run" / "summary.json").is_file() and (tmp_path / "run" / "final").is_dir()
