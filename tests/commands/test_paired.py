"""``grpolab eval --against`` and ``grpolab eval --compare DIR --arms A,B``: paired pass@k without sampling again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpolab.cli import main
from grpolab.diagnostics.passk import pass_at_k_curve

pytestmark = pytest.mark.fast

FIXTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval"
           / "samples_gsm8k_2026-11-27T10-00-00.000000.jsonl")
C_FIXTURE = [4, 2, 1, 0, 3, 1, 0, 2]  # the fixture's correct counts of 4 (tests/fixtures/lm_eval/make_samples.py)


def _write(tmp_path: Path, name: str, edit) -> Path:
    lines = [json.loads(text) for text in FIXTURE.read_text().splitlines()]
    for record in lines:
        edit(record)
    path = tmp_path / name / FIXTURE.name
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(record) for record in lines) + "\n")
    return path


def _all_right(record: dict) -> None:
    record["resps"] = [[f"#### {record['target']}"] * 4]


def _refused(args: list[str], capsys: pytest.CaptureFixture[str], pattern: str) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(pattern, err), err


def _json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_against_samples_gives_the_difference_of_the_two_files_curves(tmp_path, capsys):
    better = _write(tmp_path, "b", _all_right)
    assert main(["eval", "--from-samples", str(better), "--against", str(FIXTURE), "--json"]) == 0
    band = _json(capsys)["prompt_level"]
    curve = pass_at_k_curve(np.full(8, 4), C_FIXTURE)
    assert band["ks"] == [1, 2, 3, 4]
    assert band["difference"] == pytest.approx([1.0 - curve[k] for k in band["ks"]], abs=1e-12)
    assert all(low <= d <= high for low, d, high in zip(band["band_low"], band["difference"], band["band_high"],
                                                           strict=True))


def test_against_samples_prints_the_table_and_what_the_band_supports(tmp_path, capsys):
    better = _write(tmp_path, "b", _all_right)
    assert main(["eval", "--from-samples", str(better), "--against", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "8 prompts, paired" in out and "band over k" in out and "these two checkpoints" in out
    assert f"A = {better}, B = {FIXTURE};" in " ".join(out.split())  # was: "A = A, B = B"


def test_documents_that_differ_are_refused_naming_the_first(tmp_path, capsys):
    def rename(record: dict) -> None:
        if record["doc_id"] == 5:
            record["doc_id"] = 105

    other = _write(tmp_path, "b", rename)
    _refused(["eval", "--from-samples", str(FIXTURE), "--against", str(other)], capsys, "prompt 5 of .* is not in")


def test_another_reference_is_refused(tmp_path, capsys):
    def retarget(record: dict) -> None:
        if record["doc_id"] == 2:
            record["target"] = "1"

    other = _write(tmp_path, "b", retarget)
    _refused(["eval", "--from-samples", str(FIXTURE), "--against", str(other)], capsys,
             "prompt 2 has another reference")


def test_different_n_per_prompt_is_allowed_and_stated(tmp_path, capsys):
    def more(record: dict) -> None:
        if record["doc_id"] == 0:
            record["resps"] = [record["resps"][0] * 2]

    other = _write(tmp_path, "b", more)
    assert main(["eval", "--from-samples", str(other), "--against", str(FIXTURE), "--json"]) == 0
    data = _json(capsys)
    assert data["notes"] and "n differs on 1 of 8 prompts" in data["notes"][0]
    assert data["prompt_level"]["ks"] == [1, 2, 3, 4]


def _eval_json(path: Path, successes: list[int], ids: list[str], n: int = 4) -> Path:
    path.write_text(json.dumps({"phase": "end", "n": n, "successes": successes, "problem_ids": ids}))
    return path


def test_model_against_reads_eval_out_files_and_run_directories(tmp_path, capsys):
    ids = [f"p{i}" for i in range(8)]
    a = _eval_json(tmp_path / "a.json", C_FIXTURE, ids)
    run = tmp_path / "run"
    run.mkdir()
    row = {"phase": "end", "step": 3, "n": 4, "greedy_accuracy": 0.5, "successes": [4] * 8, "problem_ids": ids[::-1]}
    (run / "eval.jsonl").write_text(json.dumps(row) + "\n")
    assert main(["eval", "--model", str(run), "--against", str(a), "--json"]) == 0
    band = _json(capsys)["prompt_level"]
    curve = pass_at_k_curve(np.full(8, 4), C_FIXTURE)
    assert band["difference"] == pytest.approx([1.0 - curve[k] for k in band["ks"]], abs=1e-12)


def test_model_against_other_prompts_is_refused(tmp_path, capsys):
    a = _eval_json(tmp_path / "a.json", [1, 2, 3], ["x", "y", "z"])
    b = _eval_json(tmp_path / "b.json", [1, 2, 3], ["x", "y", "w"])
    _refused(["eval", "--model", str(a), "--against", str(b)], capsys, "prompt z of .* is not in")


def test_an_evaluation_without_samples_is_refused(tmp_path, capsys):
    a = _eval_json(tmp_path / "a.json", [], [], n=0)
    _refused(["eval", "--model", str(a), "--against", str(a)], capsys, "no per-prompt successes")


def _results(rng: np.random.Generator, seeds: int = 3, prompts: int = 40, n: int = 4) -> pd.DataFrame:
    p = rng.beta(1, 2, prompts)
    rows = []
    for estimator, lift in (("sign", 0.25), ("dr_grpo", 0.0)):
        for seed in range(seeds):
            successes = rng.binomial(n, np.minimum(1, p + lift + 0.05 * seed)).tolist()
            for phase, step in (("start", 0), ("end", 5)):
                rows.append({"run_id": f"{estimator}-{seed}", "estimator": estimator, "seed": seed, "group_size": 4,
                             "phase": phase, "step": step, "n": n, "successes": successes, "status": "finished",
                             "variant": ""})
    return pd.DataFrame(rows)


def test_compare_arms_gives_both_levels(tmp_path, capsys):
    _results(np.random.default_rng(0)).to_parquet(tmp_path / "results.parquet")
    assert main(["eval", "--compare", str(tmp_path), "--arms", "sign,dr_grpo", "--json"]) == 0
    (pair,) = _json(capsys)["pairs"]
    assert pair["seeds"] == [0, 1, 2] and pair["group_size"] == 4
    seed, band = pair["seed_level"], pair["prompt_level"]
    per_seed = np.array(pair["curves_a"]) - np.array(pair["curves_b"])
    assert seed["difference"] == pytest.approx(per_seed.mean(axis=0).tolist(), abs=1e-12)
    assert band["ks"] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]  # pooled: 3 seeds x 4 samples per prompt
    assert band["excludes_zero"]  # a lift of 25 points is found


def test_compare_arms_text_names_both_claims(tmp_path, capsys):
    _results(np.random.default_rng(1)).to_parquet(tmp_path / "results.parquet")
    assert main(["eval", "--compare", str(tmp_path), "--arms", "sign,dr_grpo"]) == 0
    out = capsys.readouterr().out
    assert "these two checkpoints" in out and "a claim about the estimator" in out


def test_compare_unknown_arm_is_refused(tmp_path, capsys):
    _results(np.random.default_rng(2)).to_parquet(tmp_path / "results.parquet")
    _refused(["eval", "--compare", str(tmp_path), "--arms", "sign,grpo"], capsys,
             "no finished run of arm 'grpo'.*dr_grpo, sign")


def test_a_k_whose_prompts_all_differ_alike_shows_no_zero_width_interval(tmp_path, capsys):
    """Both files solve every prompt at k = n: was "[+0.0000, +0.0000]", read as a certain zero difference."""
    better = _write(tmp_path, "b", _all_right)
    assert main(["eval", "--from-samples", str(better), "--against", str(better)]) == 0
    out = capsys.readouterr().out
    assert "[+0.0000, +0.0000]" not in out and "each prompt +0.0000" in out
