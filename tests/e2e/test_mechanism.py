"""`grpolab mechanism` on a tiny `grpolab compare` of the embedded model: its files, and numbers that must
agree with each other, with eval.jsonl, and with a run whose final model is the start model itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpolab.cli import main
from grpolab.models import load_policy
from in_process_workers import workers_in_process

PROMPTS, SAMPLES = 8, 2


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two estimators, one seed, 3 steps with a checkpoint every 2; then the dr_grpo run's final model is
    replaced by the start model, so that its every shift must be exactly 0."""
    out = tmp_path_factory.mktemp("mechanism") / "cmp"
    with workers_in_process():  # what mechanism reads is under test, not the sweep's workers
        code = main(["compare", "--estimators", "sign,dr_grpo", "--seeds", "1", "--group-sizes", "2", "--workers", "2",
                     "--out", str(out), "--lr", "3e-3", "--steps", "3", "--prompts-per-step", "8", "--eval-limit", "8",
                     "--eval-samples", "2", "--checkpoint-every", "2", "--no-report"])
    assert code == 0
    unchanged = out / "runs" / "dr_grpo-G2-seed0" / "final"
    shutil.rmtree(unchanged)
    start = load_policy("embedded")
    start.model.save_pretrained(str(unchanged), safe_serialization=True)
    start.tokenizer.save_pretrained(str(unchanged))
    assert main(["mechanism", str(out), "--prompts", str(PROMPTS), "--samples", str(SAMPLES)]) == 0
    return out


def _per_run(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "mechanism_runs.csv", keep_default_na=False, na_values=[""])


def test_writes_its_files_and_keeps_the_final_checkpoint(compared: Path) -> None:
    for name in ("mechanism.csv", "mechanism_runs.csv", "mechanism.md", "mechanism.png"):
        assert (compared / name).stat().st_size > 0, name
    text = (compared / "mechanism.md").read_text()
    for heading in ("## 1. Format breakage", "## 2. Per-token change", "## 3. pass@k before and after",
                    "## 4. The update's geometry"):
        assert heading in text
    for run in ("sign-G2-seed0", "dr_grpo-G2-seed0"):  # step 3 is no multiple of 2: saved as the last step
        assert (compared / "runs" / run / "checkpoints" / "step-000003").is_dir()


def test_token_classes_and_outcomes_add_up(compared: Path) -> None:
    tokens = _per_run(compared).query("part == 'tokens' and measure == 'dlogp'")
    for _, run in tokens.groupby("run_id"):
        cell = {(r.token_class, r.outcome): r for r in run.itertuples()}
        for outcome in ("correct", "wrong", "all"):
            assert cell["format", outcome].tokens + cell["content", outcome].tokens == cell["all", outcome].tokens
        for token_class in ("format", "content", "all"):
            assert cell[token_class, "correct"].tokens + cell[token_class, "wrong"].tokens == \
                cell[token_class, "all"].tokens
        assert cell["all", "correct"].completions + cell["all", "wrong"].completions == PROMPTS * SAMPLES
        assert cell["format", "all"].tokens >= PROMPTS * SAMPLES  # every reverse completion ends with an EOS
        parts = [cell[c, "all"] for c in ("format", "content")]
        weighted = sum(p.value * p.tokens for p in parts) / cell["all", "all"].tokens
        assert weighted == pytest.approx(cell["all", "all"].value, abs=1e-12)


def test_the_start_model_as_a_final_model_shifts_nothing_and_training_does(compared: Path) -> None:
    tokens = _per_run(compared).query("part == 'tokens' and measure in ('dlogp', 'dprob')")
    unchanged = tokens[tokens["run_id"] == "dr_grpo-G2-seed0"]["value"].dropna()
    trained = tokens[tokens["run_id"] == "sign-G2-seed0"]["value"].dropna()
    assert len(unchanged) and (unchanged == 0.0).all()
    assert (trained != 0.0).any()
    start = _per_run(compared).query("part == 'tokens' and measure == 'start_logprob'")
    assert start.groupby(["token_class", "outcome"])["value"].nunique(dropna=False).eq(1).all(), \
        "every run is scored on the same start-policy completions"


def test_passk_rows_are_the_eval_log_and_change_is_end_minus_start(compared: Path) -> None:
    per_run = _per_run(compared).query("part == 'passk'")
    for run_id, run in per_run.groupby("run_id"):
        evaluations = {row["phase"]: row for row in map(json.loads, (compared / "runs" / run_id / "eval.jsonl")
                                                        .read_text().splitlines())}
        for row in run.itertuples():
            if row.phase == "change":
                ends = run[(run["k"] == row.k) & (run["phase"] == "end")]["value"].item()
                starts = run[(run["k"] == row.k) & (run["phase"] == "start")]["value"].item()
                assert row.value == pytest.approx(ends - starts)
            else:
                assert row.value == pytest.approx(evaluations[row.phase]["pass_at_k"][str(int(row.k))])
    assert set(per_run["k"]) == {1, 2}


def test_the_eval_logs_unscorable_share_is_read_at_start_and_end(compared: Path) -> None:
    rows = _per_run(compared).query("part == 'format' and measure == 'eval_unscorable'")
    assert len(rows) == 2 * 3 and rows["value"].notna().all()  # runs x (start, end, change)
    for run_id, run in rows.groupby("run_id"):
        logged = {r["phase"]: r["unscorable"] for r in map(json.loads, (compared / "runs" / run_id / "eval.jsonl")
                                                          .read_text().splitlines())}
        for phase in ("start", "end"):
            assert run[run["phase"] == phase]["value"].item() == pytest.approx(logged[phase])


def test_summary_means_are_the_per_run_values_with_one_seed(compared: Path) -> None:
    summary = pd.read_csv(compared / "mechanism.csv", keep_default_na=False, na_values=[""])
    per_run = _per_run(compared)
    assert set(summary["n_runs"]) <= {0, 1}
    recorded = summary[summary["n_runs"] == 1]
    merged = recorded.merge(per_run, on=["part", "measure", "estimator", "token_class", "outcome", "phase"])
    merged = merged[(merged["k_x"].fillna(0) == merged["k_y"].fillna(0))]
    assert np.allclose(merged["mean"], merged["value"])


def test_a_wrong_directory_and_a_missing_final_model_fail_in_one_line(
        compared: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["mechanism", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no results.parquet" in err and "grpolab compare --out" in err, err
    copy = tmp_path / "copy"
    shutil.copytree(compared, copy, ignore=shutil.ignore_patterns("mechanism*"))
    shutil.rmtree(copy / "runs" / "sign-G2-seed0" / "final")
    assert main(["mechanism", str(copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no final model" in err and f"grpolab compare --out {copy}" in err, err


def test_an_out_that_cannot_be_written_is_refused_before_measuring(
        compared: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: every run's model loaded and sampled, then the write failed."""
    import grpolab.mechanism

    monkeypatch.setattr(grpolab.mechanism, "measure_runs", lambda *a, **k: pytest.fail("measured before --out"))
    (tmp_path / "a-file").write_text("")
    assert main(["mechanism", str(compared), "--out", str(tmp_path / "a-file" / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot write to --out {tmp_path / 'a-file' / 'm'}" in err, err
