"""Each prompt's fate (``grpolab.diagnostics.fate``, read by ``grpolab.audit.fate_source``): states, transitions and
the share of all-wrong-first prompts that escaped, counted by hand on small rollout tables."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from grpolab.audit.fate_source import prompt_counts, run_fate
from grpolab.diagnostics.fate import escaped_share, fate_counts, prompt_states, transitions
from grpolab.train.runlog import RolloutLog
from grpolab.train.shell import rollout_table

pytestmark = pytest.mark.fast

NAN = math.nan
# step -> [(prompt_id, rewards of its group)], G = 2
GROUPS = {
    1: [("a", [0, 0]), ("b", [0, 0]), ("d", [1, 0]), ("e", [NAN, NAN]), ("f", [0, 0]), ("f", [1, 0])],
    2: [("b", [0, 0]), ("c", [0, 0]), ("e", [1, 1])],
    3: [("a", [0, 1])],
    4: [("d", [0, 0])],
    5: [("a", [1, 1])],
}
# a: wrong -> mixed -> right (escaped, solved); b: wrong -> wrong; c: wrong once; d: mixed -> wrong;
# e: nothing scorable, then right; f: two groups in step 1 pooled to 1 of 4, mixed


def _write_run(run_dir: Path) -> None:
    log = RolloutLog(run_dir / "rollouts")
    for step, groups in GROUPS.items():
        ids = [p for p, rewards in groups for _ in rewards]
        rewards = [r for _, group in groups for r in group]
        size = len(rewards)
        log.write(step, rollout_table(step, ids, ["x"] * size, rewards, [0.0] * size, [1] * size, [False] * size,
                                      group_size=2))


def _counts() -> pd.DataFrame:
    rows = [(step, p, sum(not math.isnan(r) for r in rs), sum(r == 1 for r in rs))
            for step, groups in GROUPS.items() for p, rs in groups]
    return pd.DataFrame(rows, columns=["step", "prompt_id", "n", "correct"])


def test_states_pool_a_step_and_drop_what_was_not_scorable() -> None:
    states = prompt_states(_counts())
    by_prompt = states.groupby("prompt_id")["state"].apply(list).to_dict()
    assert by_prompt == {"a": ["all_wrong", "mixed", "all_right"], "b": ["all_wrong", "all_wrong"],
                         "c": ["all_wrong"], "d": ["mixed", "all_wrong"], "e": ["all_right"], "f": ["mixed"]}


def test_fate_counts_and_transitions_by_hand() -> None:
    states = prompt_states(_counts())
    counts = fate_counts(states)
    assert counts == {"prompts": 6, "all_wrong_first": 3, "all_wrong_first_resampled": 2, "escaped": 1, "solved": 1}
    assert escaped_share(counts) == 0.5
    table = transitions(states)
    assert table.loc["all_wrong"].tolist() == [1, 1, 0] and table.loc["mixed"].tolist() == [1, 0, 1]
    assert table.loc["all_right"].tolist() == [0, 0, 0] and int(table.to_numpy().sum()) == 4
    assert math.isnan(escaped_share({**counts, "all_wrong_first_resampled": 0}))


def test_the_reader_gives_the_same_counts_from_the_rollout_tables_a_run_writes(tmp_path: Path) -> None:
    _write_run(tmp_path)
    read = prompt_counts(sorted((tmp_path / "rollouts").glob("step-*.parquet")))
    expected = _counts().groupby(["step", "prompt_id"], as_index=False)[["n", "correct"]].sum()
    pd.testing.assert_frame_equal(read.sort_values(["step", "prompt_id"]).reset_index(drop=True), expected)
    fate = run_fate(tmp_path)
    assert fate["escaped"] == 1 and fate["all_wrong_first_resampled"] == 2 and fate["escaped_share"] == 0.5
    assert fate["transitions"]["mixed"] == {"all_wrong": 1, "mixed": 0, "all_right": 1}
    assert run_fate(tmp_path / "elsewhere") is None


def test_the_audit_shows_the_fate_of_a_run_and_none_for_a_plain_table(tmp_path: Path) -> None:
    from grpolab.audit import audit
    from grpolab.audit.render import html_sections

    _write_run(tmp_path / "run")
    result = audit(tmp_path / "run")
    assert result["prompt_fate"]["all_wrong_first"] == 3 and result["prompt_fate"]["solved"] == 1
    [section] = [s for s in html_sections(result) if s.title == "Each prompt's fate"]
    rows = dict(section.tables[0][1].itertuples(index=False))
    assert rows["  later mixed or all right (escaped)"] == "1 (50.0%)" and rows["  of them sampled again"] == "2"
    assert section.tables[1][1].set_index("from / to").loc["all_wrong", "mixed"] == 1
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(tmp_path / "run" / "rollouts" / "step-000001.parquet"), plain)
    assert audit(plain)["prompt_fate"] is None
