"""grpolab audit: the streaming aggregation equals grpolab.diagnostics on the same groups, every input
format gives the same answer, bad files give clean errors, and the CLI writes JSON and HTML."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpolab import diagnostics, render
from grpolab.audit import aggregate, audit
from grpolab.audit.render import write_html
from grpolab.cli import main
from grpolab.errors import UserError

pytestmark = pytest.mark.fast

KEYS = ("all_correct", "all_wrong", "degenerate", "p_mean", "d_iid", "jensen_gap")


def _rewards(P: int, G: int, seed: int, nan_share: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.4, 0.4, size=(P, 1))
    rewards = (rng.random((P, G)) < p).astype(np.float64)  # [P, G]
    rewards[rng.random((P, G)) < nan_share] = np.nan
    return rewards


def _rounded(value: object) -> object:
    """``value`` with every float rounded to 12 digits (sums in another order differ in the last bits)."""
    if isinstance(value, float):
        return round(value, 12)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _long(rewards: np.ndarray, step: int | None = None) -> pd.DataFrame:
    P, G = rewards.shape
    frame = pd.DataFrame(
        {
            "prompt_id": np.repeat([f"q{i}" for i in range(P)], G),
            "reward": rewards.reshape(-1),
            "length": np.tile(np.arange(1, G + 1), P),
        }
    )
    if step is not None:
        frame.insert(0, "step", step)
    return frame


@pytest.mark.parametrize(("P", "G", "nan_share"), [(50, 4, 0.0), (40, 8, 0.1), (30, 2, 0.0)])
def test_matches_diagnostics_degeneracy(tmp_path: Path, P: int, G: int, nan_share: float) -> None:
    rewards = _rewards(P, G, seed=P, nan_share=nan_share)
    _long(rewards).sample(frac=1.0, random_state=0).to_parquet(tmp_path / "log.parquet")  # shuffled rows
    result = audit(tmp_path / "log.parquet")
    expected = diagnostics.degeneracy(rewards)
    for key in KEYS:
        assert result[key] == pytest.approx(expected[key]), key
    assert result["groups"] == P and result["group_size"] == G
    if nan_share == 0:
        assert 1 - result["zero_gradient_completions"] == pytest.approx(expected["useful_fraction"])
        curve = diagnostics.pass_at_k_curve(np.full(P, G), np.nansum(rewards, axis=1).astype(int))
        assert result["pass_at_k"] == pytest.approx({str(k): v for k, v in curve.items()})


def test_hand_computed_steps_tokens_and_sign(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "step": [0, 0, 0, 0, 1, 1, 1, 1],
            "prompt_id": ["a", "a", "b", "b", "a", "a", "b", "b"],
            "reward": [1, 1, 0, 1, 0, 0, np.nan, 1],
            "length": [10, 20, 30, 40, 1, 2, 3, 4],
        }
    )
    frame.to_csv(tmp_path / "log.csv", index=False)
    result = audit(tmp_path / "log.csv")
    assert result["groups"] == 4 and result["steps"] == 2
    assert [s["degenerate"] for s in result["per_step"]] == [0.5, 1.0]  # step 1: all-wrong + one scorable
    assert result["all_correct"] == 0.5 and result["all_wrong"] == 0.25
    assert result["zero_gradient_completions"] == 6 / 8  # groups (0,a), (1,a), (1,b)
    assert result["zero_gradient_tokens"] == (30 + 3 + 7) / 110
    assert result["sign_used_completions"] == 7 / 8 and result["sign_used_tokens"] == 107 / 110
    counts = result["success_histogram"]["counts"]  # c/n = 0, 1/2, 1, 1 (n = 1 for (1,b)): binned
    assert (counts[0], counts[5], counts[-1], sum(counts)) == (1, 1, 2, 4)


def test_missing_advantages_are_unknown_not_zero(tmp_path: Path) -> None:
    """A NaN advantage is not a zero one: a group with a missing advantage is judged by its rewards, with a warning
    (read as 0, the mixed group (0, b) counted as zero-gradient: 100% degenerate at step 0)."""
    frame = pd.DataFrame(
        {
            "step": [0, 0, 0, 0, 1, 1, 1, 1],
            "prompt_id": ["a", "a", "b", "b", "a", "a", "b", "b"],
            "reward": [1, 1, 0, 1, 0, 0, np.nan, 1],
            "advantage": [0.0, 0.0, np.nan, np.nan, 0.0, 0.0, np.nan, 1.0],
        }
    )
    frame.to_csv(tmp_path / "log.csv", index=False)
    result = audit(tmp_path / "log.csv")
    assert [s["degenerate"] for s in result["per_step"]] == [0.5, 1.0]
    assert result["zero_gradient_completions"] == 6 / 8  # (0,a) by advantages; (1,a) too; (1,b) one scorable
    assert any("3 of 8 advantages are missing (NaN or null), in 2 groups" in line for line in result["warnings"])
    frame["advantage"] = frame["advantage"].fillna(0.5)
    frame.to_csv(tmp_path / "log.csv", index=False)
    warned = audit(tmp_path / "log.csv")["warnings"]
    assert not any("advantages are missing" in line for line in warned)
    assert any("1 of 8 rewards are missing (NaN or null); 0 group(s) have none scorable" in line for line in warned)


@pytest.mark.parametrize("steps", [["a", "a", "b", "b"], [0.5, 0.5, 1.5, 1.5]])
def test_a_step_column_of_text_or_fractions_is_named_as_such(tmp_path: Path, steps: list) -> None:
    """One file, so no two files disagree: the line names the step column and what it holds."""
    frame = pd.DataFrame({"step": steps, "prompt_id": ["a", "a", "b", "b"], "reward": [1, 0, 1, 1]})
    frame.to_parquet(tmp_path / "log.parquet")
    with pytest.raises(UserError, match=r"the step column 'step' holds .* not whole numbers") as raised:
        audit(tmp_path / "log.parquet")
    assert "do not agree" not in str(raised.value)
    frame["step"] = [0.0, 0.0, 1.0, 1.0]  # whole numbers written as floats are steps
    frame.to_parquet(tmp_path / "log.parquet")
    assert audit(tmp_path / "log.parquet")["steps"] == 2


def test_formats_agree_and_streaming_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = pd.concat([_long(_rewards(20, 4, seed=s), step=s) for s in range(3)], ignore_index=True)
    frame.to_parquet(tmp_path / "a.parquet")
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.to_json(tmp_path / "a.jsonl", orient="records", lines=True)
    reference = audit(tmp_path / "a.parquet")
    for name in ("a.csv", "a.jsonl"):
        other = audit(tmp_path / name)
        assert {k: other[k] for k in KEYS} == pytest.approx({k: reference[k] for k in KEYS}), name
    monkeypatch.setattr(aggregate, "_COMPACT_ROWS", 5)
    monkeypatch.setattr(aggregate, "_MERGE_ROWS", 7)
    streamed = audit(tmp_path / "a.parquet", batch_rows=9)  # groups split across batches, many merges
    streamed.pop("input"), reference.pop("input")
    assert _rounded(streamed) == _rounded(reference)


def test_grpolab_run_directory(tmp_path: Path) -> None:
    from grpolab.train.runlog import RolloutLog

    log = RolloutLog(tmp_path / "rollouts")
    steps = (([1.0, 1.0, 0.0, 1.0], [0.0, 0.0, -0.7, 0.7]), ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]))
    for step, (rewards, advantages) in enumerate(steps):
        log.write(
            step,
            {
                "step": [step] * 4,
                "prompt_id": ["p0", "p0", "p1", "p1"],
                "sample": [0, 1, 0, 1],
                "completion": ["x"] * 4,
                "reward": rewards,
                "advantage": advantages,
                "length": [3] * 4,
                "truncated": [False] * 4,
            },
        )
    result = audit(tmp_path)
    assert result["input"]["kind"] == "grpolab" and result["groups"] == 4
    assert result["input"]["columns"]["advantage"] == "advantage"
    assert [s["degenerate"] for s in result["per_step"]] == [0.5, 1.0]
    assert [s["uniform"] for s in result["per_step"]] == [0.5, 1.0]


def _run_with_truncation(root: Path, truncated: list[list[bool]]) -> None:
    """A grpolab run directory of one step per entry of ``truncated``: two prompts of two completions each."""
    from grpolab.train.runlog import RolloutLog

    log = RolloutLog(root / "rollouts")
    for step, flags in enumerate(truncated, start=1):
        log.write(step, {"step": [step] * 4, "prompt_id": ["p0", "p0", "p1", "p1"], "sample": [0, 1, 0, 1],
                         "completion": ["x"] * 4, "reward": [1.0, 0.0, 0.0, 0.0], "advantage": [0.5, -0.5, 0, 0],
                         "length": [3] * 4, "truncated": flags})


def test_the_audit_shows_the_truncated_share(tmp_path: Path) -> None:
    from rich.console import Console

    from grpolab.audit.render import html_sections, render_terminal

    _run_with_truncation(tmp_path, [[True, False, False, False], [True, True, True, False]])
    result = audit(tmp_path)
    assert result["input"]["columns"]["truncated"] == "truncated"
    assert "truncated" not in result["input"]["columns"]["not_read"]
    assert [s["truncated"] for s in result["per_step"]] == [0.25, 0.75]
    assert result["truncated"] == 0.5
    console = Console(record=True, width=200)
    render_terminal(result, console)
    text = console.export_text()
    assert "Truncated" in text and "25.0%" in text and "75.0%" in text
    (per_step,) = [section for section in html_sections(result) if section.title == "Per step"]
    assert per_step.tables[0][1]["Truncated"].tolist() == ["25.0%", "75.0%"]


def test_a_log_without_a_truncated_column_shows_a_dash(tmp_path: Path) -> None:
    from grpolab.audit.render import step_table

    pq.write_table(pa.table({"step": [1, 1], "prompt_id": ["a", "a"], "reward": [1.0, 0.0]}), tmp_path / "r.parquet")
    result = audit(tmp_path / "r.parquet")
    assert result["truncated"] is None and result["per_step"][0]["truncated"] is None
    header, rows = step_table(result["per_step"])
    assert rows[0][header.index("Truncated")] == "-"


def test_a_truncated_column_of_text_is_one_line_naming_it(tmp_path: Path) -> None:
    table = pa.table({"step": [1, 1], "prompt_id": ["a", "a"], "reward": [1.0, 0.0], "truncated": ["no", "yes"]})
    pq.write_table(table, tmp_path / "r.parquet")
    with pytest.raises(UserError, match=r"column 'truncated' holds string, not true/false") as error:
        audit(tmp_path / "r.parquet")
    assert "\n" not in str(error.value)


def test_the_per_step_columns_are_the_metric_tables_audit_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row of ``grpolab.metric_keys.KEYS`` that names an audit field is a column under its label, in table
    order; nothing else is."""
    import dataclasses

    from grpolab import metric_keys
    from grpolab.audit.render import step_table

    per_step = [{"step": 3, "groups": 4, "success_rate": 0.5, "truncated": None, "uniform": 0.25, "degenerate": 0.25,
                 "d_iid": 0.125, "all_wrong": 0.75}]
    header, rows = step_table(per_step)
    assert header == [k.label for k in metric_keys.KEYS if k.audit]
    assert "All-wrong groups" not in header
    extra = [dataclasses.replace(k, audit="all_wrong") if k.name == "starvation/all_wrong" else k
             for k in metric_keys.KEYS]
    monkeypatch.setattr(metric_keys, "KEYS", tuple(extra))
    header, rows = step_table(per_step)
    assert rows[0][header.index("All-wrong groups")] == "75.0%"
    assert rows[0][header.index("Step")] == "3" and rows[0][header.index("D_iid")] == "12.5%"


def test_a_run_directory_reads_only_the_step_files_the_trainer_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's backup copy of a step (any other name in rollouts/) is not counted a second time."""
    import shutil

    from grpolab.train.runlog import RolloutLog

    log = RolloutLog(tmp_path / "rollouts")
    for step in (1, 2):
        log.write(step, {"step": [step] * 4, "prompt_id": ["p0", "p0", "p1", "p1"], "sample": [0, 1, 0, 1],
                         "completion": ["x"] * 4, "reward": [1.0, 0.0, 0.0, 0.0], "advantage": [0.5, -0.5, 0, 0],
                         "length": [3] * 4, "truncated": [False] * 4})
    reference = audit(tmp_path)
    assert reference["completions"] == 8 and reference["warnings"] == []
    rollouts = tmp_path / "rollouts"
    shutil.copy(rollouts / "step-000002.parquet", rollouts / "step-000002 (copy).parquet")
    shutil.copy(rollouts / "step-000002.parquet", rollouts / "backup-step-000002.parquet")
    shutil.copy(rollouts / "step-000002.parquet", rollouts / "step-0000002.parquet")
    result = audit(tmp_path)
    assert result["completions"] == 8 and result["groups"] == 4 and result["degenerate"] == reference["degenerate"]
    assert result["input"]["files"] == 2
    assert result["input"]["other_files_skipped"] == [
        "backup-step-000002.parquet", "step-0000002.parquet", "step-000002 (copy).parquet"]
    (warning,) = result["warnings"]
    assert "\n" not in warning and "3 files the trainer did not write" in warning
    assert "backup-step-000002.parquet" in warning and "step-000002 (copy).parquet" in warning
    assert main(["audit", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["completions"] == 8
    assert captured.err.count("\n") == 1 and "did not write" in captured.err
    for path in rollouts.glob("step-00000?.parquet"):
        path.unlink()  # only foreign files left: refused in one line, not read
    with pytest.raises(UserError, match=r"no step-NNNNNN.parquet") as error:
        audit(tmp_path)
    assert "\n" not in str(error.value)


def test_trl_completion_logs(tmp_path: Path) -> None:
    folder = tmp_path / "completions"
    folder.mkdir()
    prompts = [[{"role": "user", "content": f"q{i}"}] for i in (0, 0, 1, 1)]
    table = {
        "prompt": prompts,
        "completion": ["a", "b", "c", "d"],
        "accuracy": [1.0, 0.0, None, None],
        "format": [0.5, 0.0, 1.0, None],  # not 0/1: not the correctness column
        "advantage": [0.7, -0.7, 0, 0],
    }
    for step in (1, 2):  # TRL rewrites the same buffer at every logging step: step 2 is a duplicate
        pd.DataFrame({"step": step, **table}).to_parquet(folder / f"completions_{step:05d}.parquet")
    result = audit(tmp_path)
    assert result["input"]["kind"] == "trl" and result["input"]["columns"]["reward"] == "accuracy"
    assert result["input"]["columns"]["not_read"] == ["format"]
    assert result["input"]["files"] == 1 and result["input"]["duplicate_files_skipped"] == 1
    assert result["groups"] == 2 and result["completions"] == 4 and result["group_size"] == 2
    assert result["degenerate"] == 0.5  # q1: every advantage zero
    assert result["unscorable_groups"] == 0.5 and result["all_correct"] == 0.0 and result["uniform"] == 0.5
    # steps 1 and 2 are both logged (2 as a duplicate of 1); the two empty accuracies are said
    assert result["warnings"] == ["2 of 4 rewards are missing (NaN or null); 1 group(s) have none scorable: they "
                                  "count as uniform (D_real) but have no success rate, so they widen the Jensen gap"]
    (folder / "completions_00001.parquet").rename(folder / "completions_00001.parquet.bak.parquet")
    pd.DataFrame({"step": 1, **table}).to_parquet(folder / "completions_00001.parquet")
    (folder / "completions_00002.parquet").rename(folder / "completions_00002 (copy).parquet")
    copied = audit(tmp_path)
    assert copied["completions"] == 4 and copied["input"]["other_files_skipped"] == [
        "completions_00001.parquet.bak.parquet", "completions_00002 (copy).parquet"]
    assert "skipped 2 files the trainer did not write" in copied["warnings"][-1]


def _trl_same_prompt(folder: Path, advantages: bool, extra: dict | None = None) -> None:
    """Four groups of G = 4 with one prompt, adjacent (as TRL's sampler may place them): 3 all-wrong, 1 mixed."""
    folder.mkdir(parents=True, exist_ok=True)
    rewards = [0.0] * 12 + [1.0, 1.0, 0.0, 0.0]
    table = {"step": [1] * 16, "prompt": ["q"] * 16, "completion": ["c"] * 16, "accuracy": rewards, **(extra or {})}
    if advantages:
        table["advantage"] = [0.0] * 12 + [0.5, 0.5, -0.5, -0.5]
    pd.DataFrame(table).to_parquet(folder / "completions_00001.parquet")


def test_trl_adjacent_groups_with_one_prompt_do_not_merge(tmp_path: Path) -> None:
    """docs/audit.md: a TRL group is a block of num_generations rows, never a prompt text."""
    _trl_same_prompt(tmp_path / "adv" / "completions", advantages=True)
    result = audit(tmp_path / "adv")  # the advantages say where groups end: 16 and 8 mix zero and non-zero
    assert result["group_size"] == 4 and result["groups"] == 4 and result["degenerate"] == 0.75
    assert "advantage" in result["input"]["grouping"] and result["warnings"] == []
    _trl_same_prompt(tmp_path / "sample" / "completions", advantages=False, extra={"sample": [0, 1, 2, 3] * 4})
    result = audit(tmp_path / "sample")  # a sample index column
    assert result["group_size"] == 4 and result["degenerate"] == 0.75
    _trl_same_prompt(tmp_path / "run" / "completions", advantages=False)
    (tmp_path / "run" / "config.yaml").write_text("group_size: 4\n")
    for path in (tmp_path / "run", tmp_path / "run" / "completions"):  # the run's config.yaml
        result = audit(path)
        assert result["group_size"] == 4 and result["degenerate"] == 0.75
        assert "config.yaml" in result["input"]["grouping"]
    _trl_same_prompt(tmp_path / "bare" / "completions", advantages=False)
    result = audit(tmp_path / "bare")  # nothing tells: a warning in one line, naming --group-size
    (warning,) = result["warnings"]
    assert "--group-size" in warning and "\n" not in warning
    assert audit(tmp_path / "bare", group_size=4)["degenerate"] == 0.75


def _trl_doubled_groups(folder: Path, advantages: bool) -> Path:
    """Three prompts, each sampled as two adjacent groups of G = 4: one all right, one all wrong (so every group
    is degenerate), with no sample column and no run config."""
    folder.mkdir(parents=True)
    rewards = ([1.0] * 4 + [0.0] * 4) * 3
    table = {"step": [1] * 24, "prompt": [f"q{i // 8}" for i in range(24)], "completion": ["c"] * 24,
             "accuracy": rewards}
    if advantages:
        table["advantage"] = [0.0] * 24
    pd.DataFrame(table).to_parquet(folder / "completions_00001.parquet")
    return folder


@pytest.mark.parametrize("advantages", [False, True])
def test_trl_prompts_sampled_as_two_adjacent_groups_are_never_silently_merged(tmp_path: Path,
                                                                             advantages: bool) -> None:
    # was: G = 8 and 0% degenerate (without advantages), no warning; the groups are G = 4 and 100% degenerate
    log = _trl_doubled_groups(tmp_path / "completions", advantages)
    result = audit(tmp_path)
    (warning,) = result["warnings"]
    assert "G = 8 is a guess" in warning and "2 adjacent groups of 4" in warning and "--group-size" in warning
    assert "\n" not in warning
    stated = audit(tmp_path, group_size=4)
    assert (stated["group_size"], stated["groups"], stated["degenerate"], stated["warnings"]) == (4, 6, 1.0, [])
    wrong = audit(log.parent, group_size=16)  # blocks of 16 would hold rows of two prompts
    assert any("--group-size 16 does not divide the runs of one prompt's rows" in w for w in wrong["warnings"])


def test_missing_column_error_lists_columns(tmp_path: Path) -> None:
    pq.write_table(pa.table({"question": ["a"], "score_x": [1.0]}), tmp_path / "bad.parquet")
    with pytest.raises(UserError, match=r"prompt and reward column; columns present: question, score_x"):
        audit(tmp_path / "bad.parquet")
    with pytest.raises(UserError, match=r"no reward column 'nope'; columns present: question, score_x"):
        audit(tmp_path / "bad.parquet", prompt_column="question", reward_column="nope")


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(pa.table({"prompt_id": ["a"], "text": ["x"]}), tmp_path / "bad.parquet")
    assert main(["audit", str(tmp_path / "bad.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reward" in err and "prompt_id, text" in err
    assert main(["audit", str(tmp_path / "missing.parquet")]) == 2
    (tmp_path / "notes.txt").write_text("x")
    assert main(["audit", str(tmp_path / "notes.txt")]) == 2
    (tmp_path / "broken.parquet").write_text("not parquet")
    assert main(["audit", str(tmp_path / "broken.parquet")]) == 2


def test_cli_json_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pd.concat([_long(_rewards(10, 4, seed=s), step=s) for s in range(2)]).to_parquet(tmp_path / "r.parquet")
    html_path = tmp_path / "report.html"
    assert main(["audit", str(tmp_path / "r.parquet"), "--json", "--html", str(html_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("groups", "degenerate", "all_correct", "all_wrong", "d_iid", "jensen_gap", "pass_at_k"):
        assert key in result
    assert set(result["pass_at_k"]) == {"1", "2", "3", "4"}
    text = html_path.read_text()
    assert text.count("data:image/png;base64,") == 3 and "<table>" in text
    assert main(["audit", str(tmp_path / "r.parquet")]) == 0
    assert "degenerate groups" in capsys.readouterr().out


def test_html_page_comes_from_the_shared_renderer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "a<b&c"
    folder.mkdir()
    rewards = np.where(_rewards(8, 4, seed=0) > 0, 1.0, 0.5)  # not 0/1: --threshold and a warning
    _long(rewards, step=1).to_parquet(folder / "r.parquet")
    result = audit(folder / "r.parquet", threshold=0.75)
    page = write_html(result, tmp_path / "page.html").read_text()
    assert render.CSS in page and 'id="input"' in page and page.count('<img alt="') == 3
    assert "Rollout logs: " + str(tmp_path) + "/a&lt;b&amp;c/r.parquet" in page
    assert '<p class="note">Warning: 9 rewards are not 0 or 1: a success is a reward &gt;= 0.75</p>' in page
    assert '<div class="table-wrap"><table><caption>What was read</caption><thead><tr><th class="text">input' in page
    monkeypatch.setattr(render, "_html_table", lambda caption, frame: f"<TABLE rows={len(frame)}>")
    page = write_html(result, tmp_path / "page.html").read_text()  # every table is the renderer's (3: input,
    # summary, per step)
    assert page.count("<TABLE rows=") == 3 and "<tr>" not in page


def test_d_iid_over_trailing_windows_of_64_groups(tmp_path: Path) -> None:
    per_step = [_rewards(16, 4, seed=s) for s in range(10)]  # 10 steps x 16 groups
    pd.concat([_long(r, step=s + 1) for s, r in enumerate(per_step)]).to_parquet(tmp_path / "w.parquet")
    result = audit(tmp_path / "w.parquet")
    rates = [r.mean(axis=1) for r in per_step]
    expected = []
    for step in range(10):  # plain loop: the 4 steps (64 groups) ending at max(step, 3)
        last = max(step, 3)
        pbar = float(np.concatenate(rates[last - 3 : last + 1]).mean())
        expected.append(pbar**4 + (1 - pbar) ** 4)
    assert [s["d_iid"] for s in result["per_step"]] == pytest.approx(expected)
    assert result["d_iid"] == pytest.approx(np.mean(expected))
    assert result["jensen_gap"] == pytest.approx(result["uniform"] - np.mean(expected))


@pytest.mark.parametrize("length", [-5, 2.5, 1e30, 2**62])
def test_a_length_that_is_no_token_count_is_refused_not_shown_as_a_share(length: float, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"step": [1] * 8, "prompt": [f"p{i // 4}" for i in range(8)],
                             "reward": [float(i % 2) for i in range(8)], "length": [length] * 8}), path)
    code = main(["audit", str(path), "--length-column", "length"])
    err = capsys.readouterr().err  # before: "tokens sign would use -8000.0%", 0.0% (int64 overflow), a type error
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "length column 'length' holds" in err and "--length-column" in err


def _shares(result: dict) -> list[float]:
    keys = ("degenerate", "uniform", "all_correct", "all_wrong", "unscorable_groups", "d_iid", "success_rate",
            "zero_gradient_completions", "sign_used_completions", "zero_gradient_tokens", "sign_used_tokens")
    return [row[key] for row in (result, *result["per_step"]) for key in keys if row.get(key) is not None]


def test_groups_of_one_completion_show_no_group_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"step": [1] * 8, "prompt": [f"p{i}" for i in range(8)],
                             "reward": [float(i % 2) for i in range(8)], "length": [5] * 8}), path)
    result = audit(path, length_column="length")
    assert result["group_size"] == 1
    for key in ("degenerate", "uniform", "all_wrong", "d_iid", "jensen_gap", "zero_gradient_completions"):
        assert result[key] is None and result["per_step"][0].get(key) is None  # before: "degenerate 100.0%"
    assert result["success_rate"] == 0.5 and result["sign_used_completions"] == 1.0
    assert any("G = 1" in warning for warning in result["warnings"])
    assert all(0.0 <= share <= 1.0 for share in _shares(result))
    assert main(["audit", str(path), "--html", str(tmp_path / "a.html")]) == 0
    assert "degenerate groups (advantages all zero)" in capsys.readouterr().out


def test_groups_of_one_completion_keep_the_shares_their_advantages_give(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"step": [1] * 4, "prompt": ["a", "b", "c", "d"], "reward": [1.0, 0.0, 1.0, 0.0],
                             "advantage": [1.0, -1.0, 0.0, 0.0]}), path)
    result = audit(path)
    assert result["degenerate"] == 0.5 and result["zero_gradient_completions"] == 0.5 and result["uniform"] is None


def test_a_log_with_no_scorable_reward_is_refused_naming_it(tmp_path: Path) -> None:
    """Was: exit 0, "success rate 0.0%, D_iid 100%" from a NaN mean read as 0."""
    frame = pd.DataFrame({"prompt_id": ["p0", "p0", "p1", "p1"], "reward": [np.nan] * 4})
    frame.to_parquet(tmp_path / "log.parquet")
    frame.to_csv(tmp_path / "log.csv", index=False)  # pyarrow reads the empty column as null, not float
    for name in ("log.parquet", "log.csv"):
        with pytest.raises(UserError, match=f"{name}: every reward in the column 'reward' is missing"):
            audit(tmp_path / name)


def test_groups_of_other_sizes_are_said_and_the_gap_is_given_in_points_and_as_a_ratio(tmp_path: Path) -> None:
    """Four groups of 4 and a pair and a single: the shares count all six, a warning names the sizes; the gap is
    D_real - D_iid in points, and its ratio to D_iid is the sign paper's "% Jensen gap"."""
    rewards = [[0] * 4, [0] * 4, [0] * 4, [1] * 4, [1, 0], [1]]
    frame = pd.DataFrame({"prompt_id": [f"p{i}" for i, group in enumerate(rewards) for _ in group],
                          "reward": [r for group in rewards for r in group]})
    frame.to_csv(tmp_path / "log.csv", index=False)
    result = audit(tmp_path / "log.csv")
    assert result["uniform"] == pytest.approx(5 / 6)
    assert any("2 of 6 groups hold other than G = 4 completions (sizes 1, 2)" in w for w in result["warnings"])
    assert result["jensen_ratio"] == pytest.approx(result["jensen_gap"] / result["d_iid"])
    from rich.console import Console

    from grpolab.audit.render import render_terminal

    console = Console(record=True, width=200)
    render_terminal(result, console)
    shown = console.export_text()
    assert f"{100 * result['jensen_gap']:+.1f} pts ({100 * result['jensen_ratio']:+.0f}% of D_iid)" in shown
