"""The issue's acceptance run: ``grpolab train`` and ``grpolab compare`` on a 50-prompt JSONL file with
``question`` / ``answer`` fields (docs/guide.md's worked example), on the embedded model with tiny budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from grpolab.cli import main

DATA = Path(__file__).resolve().parents[2] / "examples" / "own_task" / "questions.jsonl"
FILE_FLAGS = ["--task", "file", "--data", str(DATA), "--prompt-column", "question", "--reference-column", "answer",
              "--verifier", "exact"]
TINY = ["--steps", "2", "--prompts-per-step", "4", "--eval-limit", "4", "--eval-samples", "0", "--no-progress"]


def test_example_file_has_50_question_answer_rows() -> None:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 50 and all(set(row) == {"question", "answer"} for row in rows)


def test_train_on_a_jsonl_file(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["train", *FILE_FLAGS, *TINY, "--out", str(out)]) == 0
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    table = pq.read_table(out / "rollouts" / "step-000001.parquet")
    assert table.num_rows == 4 * 4 and set(table.column("prompt_id").to_pylist()) <= {f"all/{i}" for i in range(50)}
    summary = json.loads((out / "task.json").read_text())
    assert summary["rows"] == {"all": 50} and summary["unparseable_references"] == 0
    assert sum(summary["problems"].values()) == 50
    scores = tmp_path / "eval.json"
    assert main(["eval", "--model", str(out), *FILE_FLAGS, "--n", "0", "--limit", "3", "--out", str(scores)]) == 0
    evaluated = json.loads(scores.read_text())
    assert evaluated["task"] == "file" and len(evaluated["problem_ids"]) == 3


def test_missing_column_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = [*FILE_FLAGS[:5], "questio", *FILE_FLAGS[6:]]
    assert main(["train", *flags, *TINY, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "column 'questio'" in err and "its columns are question, answer" in err


def test_compare_on_the_same_file_names_it_in_the_report(tmp_path: Path, in_process_workers: None) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", *FILE_FLAGS, *TINY[:-1], "--estimators", "sign", "--seeds", "1", "--group-sizes", "2",
                 "--workers", "1", "--out", str(out)])
    assert code == 0
    report = (out / "report.md").read_text()
    data = report[report.index("## Data"):]
    assert str(DATA) in data and "| source: all | 50 |" in data
    assert "cannot parse, left out rather than scored 0: 0" in data
    assert json.loads((out / "task.json").read_text())["source"] == str(DATA)
