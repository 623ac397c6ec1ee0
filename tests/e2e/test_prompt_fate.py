"""Each prompt's fate on a real run: a 3-step embedded-model run on a pool of 6 train prompts (each sampled about
twice), audited; the counts match a plain loop over the rollout tables it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from grpolab.cli import main


def _states_by_loop(run_dir: Path) -> dict[str, list[str]]:
    """Each prompt's states in step order, from the rollout tables by a plain loop (one group per prompt and step)."""
    states: dict[str, list[str]] = {}
    for path in sorted((run_dir / "rollouts").glob("step-*.parquet")):
        rows = pq.read_table(path).to_pylist()
        for prompt in dict.fromkeys(row["prompt_id"] for row in rows):
            right = [row["reward"] >= 0.5 for row in rows if row["prompt_id"] == prompt]
            states.setdefault(prompt, []).append("all_right" if all(right) else "mixed" if any(right)
                                                 else "all_wrong")
    return states


def test_the_audit_of_a_real_run_counts_each_prompts_fate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = tmp_path / "run"
    assert main(["train", "--model", "embedded", "--task", "reverse", "--task-options", '{"train_pool": 6}',
                 "--out", str(run), "--steps", "3", "--prompts-per-step", "4", "--group-size", "4",
                 "--eval-limit", "4", "--eval-samples", "0", "--no-eval-start", "--checkpoint-every", "0",
                 "--threads", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["audit", str(run), "--json"]) == 0
    fate = json.loads(capsys.readouterr().out)["prompt_fate"]
    states = _states_by_loop(run)
    wrong_first = [p for p, s in states.items() if s[0] == "all_wrong"]
    again = [p for p in wrong_first if len(states[p]) > 1]
    assert fate["prompts"] == len(states) == 6
    assert fate["all_wrong_first"] == len(wrong_first) and fate["all_wrong_first_resampled"] == len(again)
    assert fate["escaped"] == sum(any(s != "all_wrong" for s in states[p][1:]) for p in again)
    assert sum(sum(row.values()) for row in fate["transitions"].values()) == sum(len(s) - 1 for s in states.values())
    assert sum(len(s) - 1 for s in states.values()) == 3 * 4 - 6  # 12 samplings of 6 prompts: 6 transitions
    assert main(["audit", str(run)]) == 0
    assert "each prompt's fate" in capsys.readouterr().out
