"""Run logs (grpolab.train.runlog): one metrics line per step, torn lines skipped, resume drops later steps."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from grpolab.train.runlog import ROLLOUT_SCHEMA, MetricsLog, RolloutLog, read_metrics, rewrite_jsonl

pytestmark = pytest.mark.fast


def _log_steps(path: Path, steps: range, *, resume_from_step: int | None = None) -> None:
    log = MetricsLog(path, resume_from_step=resume_from_step)
    for step in steps:
        log.write(step, {"loss/total": step / 10, "rollout/reward_mean": float("nan") if step == 2 else 0.5})
    log.close()


def test_one_line_per_step_and_non_finite_values_are_null(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    _log_steps(path, range(1, 4))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["loss/total"] == pytest.approx(0.3)
    assert rows[1]["rollout/reward_mean"] is None and rows[0]["rollout/reward_mean"] == 0.5
    assert "NaN" not in path.read_text()  # strict JSON


def test_resume_keeps_the_steps_before_it_and_a_fresh_start_keeps_none(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    _log_steps(path, range(1, 6))
    _log_steps(path, range(3, 5), resume_from_step=3)  # steps 3 and 4 again, as after a kill
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3, 4]
    _log_steps(path, range(1, 2))
    assert [r["step"] for r in read_metrics(path)] == [1]


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "loss/po')
    assert read_metrics(path) == [{"step": 1}, {"step": 2}]
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_rewrite_jsonl_replaces_the_file_and_leaves_no_staging_file(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    path.write_text('{"step": 9}\n')
    rewrite_jsonl(path, [{"step": 1}, {"step": 2, "phase": "end"}])
    assert read_metrics(path) == [{"step": 1}, {"step": 2, "phase": "end"}]
    assert [p.name for p in tmp_path.iterdir()] == ["eval.jsonl"]


def _rows(step: int) -> dict[str, list]:
    return {"step": [step, step], "prompt_id": ["a", "a"], "sample": [0, 1], "completion": ["x", "yy"],
            "reward": [1.0, 0.0], "advantage": [0.5, -0.5], "length": [1, 2], "truncated": [False, True]}


def test_rollout_files_per_step_with_the_schema_and_resume(tmp_path: Path) -> None:
    directory = tmp_path / "rollouts"
    log = RolloutLog(directory)
    for step in (1, 2, 3):
        log.write(step, _rows(step))
    table = pq.read_table(directory / "step-000002.parquet")
    assert table.schema == ROLLOUT_SCHEMA and table.column("reward").to_pylist() == [1.0, 0.0]
    (directory / "step-000004.parquet.tmp").write_bytes(b"torn")  # a write cut short by a kill
    RolloutLog(directory, resume_from_step=3)
    assert sorted(p.name for p in directory.iterdir()) == ["step-000001.parquet", "step-000002.parquet"]
    RolloutLog(directory)
    assert list(directory.iterdir()) == []
