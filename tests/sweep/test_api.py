"""The README's Python comparison runs as printed (smaller budgets: the same calls, fewer seeds and steps)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

README = Path(__file__).resolve().parents[2] / "README.md"
SMALLER = {'seeds=3, group_sizes="2,4", lrs="1e-4,3e-4,1e-3"':
           'seeds=1, group_sizes="2", lrs="1e-3,3e-3", workers=2, lr_bracket_rounds=0',
           "TrainConfig(steps=20)": "TrainConfig(steps=2, prompts_per_step=4, eval_limit=8, eval_samples=2)"}


def _python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(block for block in blocks if "from grpolab import compare" in block)


def test_the_readme_compare_example_runs_as_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    example = _python_example().replace('"runs/cmp-py"', repr(str(tmp_path / "cmp")))
    for printed, smaller in SMALLER.items():
        assert printed in example, printed  # the example still has the shape this test edits
        example = example.replace(printed, smaller)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    result = namespace["result"]
    printed = capsys.readouterr().out
    assert "sign" in printed and "dr_grpo" in printed
    assert {(cell.estimator, cell.group_size) for cell in result.choice} == {("sign", 2), ("dr_grpo", 2)}
    assert (tmp_path / "cmp" / "report.html").is_file() and result.report[0] == tmp_path / "cmp" / "report.html"
    on_disk = pd.read_parquet(tmp_path / "cmp" / "results.parquet")
    assert len(on_disk) == len(result.results) == 2 * 2  # 2 runs x (start, end)
    assert set(on_disk["status"]) == {"finished"} and set(on_disk["variant"]) == {""}
    selection = pd.read_parquet(tmp_path / "cmp" / "selection.parquet")
    assert {"round", "bracketed", "status", "variant"} <= set(selection.columns)
    assert set(selection["lr"]) >= {1e-3, 3e-3}
