"""grpolab.mechanism.updates on synthetic run directories whose checkpoints are written here: cosines, norms
and the Adam ratio computed by hand, LoRA's weight-space update, the notes for runs with too few checkpoints,
and the two noise values (Adam's floor, the successive cosine under momentum) checked by simulating AdamW."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.mechanism import summarise
from grpolab.mechanism.analysis import parse_parts
from grpolab.mechanism.render import markdown, update_lines
from grpolab.mechanism.runs import ReportedRun, reported_runs
from grpolab.mechanism.updates import (
    adam_noise_floor,
    adam_rms_ratio,
    checkpoint_chain,
    momentum_noise_cosines,
    update_rows,
)
from grpolab.train.checkpoint import save_checkpoint

pytestmark = pytest.mark.fast

BETAS = (0.9, 0.99)
# t = 1: m̂ = m / 0.1 = [1, 0], v̂ = v / 0.01 = [1, 3] -> ‖m̂‖/‖√v̂‖ = sqrt(1 / 4) = 0.5, floor 1
ADAM = {"w/exp_avg": torch.tensor([0.1, 0.0]), "w/exp_avg_sq": torch.tensor([0.01, 0.03]),
        "w/step": torch.tensor(1.0)}


def _run(root: Path, name: str, estimator: str, seed: int, snapshots: dict[int, dict[str, list]],
         **config: object) -> ReportedRun:
    """A run directory with one checkpoint per {step: {tensor name: values}}."""
    run_dir = root / name
    for step, weights in snapshots.items():
        save_checkpoint(run_dir, step, {k: torch.tensor(v) for k, v in weights.items()}, ADAM, {}, keep=100)
    settings = {"checkpoint_every": 5, "adam_betas": BETAS, **config}
    return ReportedRun(name, estimator, 2, seed, 1e-3, run_dir, TrainConfig(**settings))


def _values(rows: list[dict]) -> dict[tuple[str, str], float]:
    """The run-level rows (phase ""), by (run, measure)."""
    return {(row["run_id"], row["measure"]): row["value"] for row in rows if row["phase"] == ""}


@pytest.fixture
def full_runs(tmp_path: Path) -> list[ReportedRun]:
    """Start W = [0, 0]. a: [1,0] -> [1,1] -> [2,1] (updates [1,0], [0,1], [1,0]: cosines 0, 0);
    b: [1,0] -> [2,0] -> [3,0] (cosines 1, 1); c keeps only step 15 of a 5-step interval."""
    return [
        _run(tmp_path, "a", "sign", 0, {5: {"w": [1.0, 0.0]}, 10: {"w": [1.0, 1.0]}, 15: {"w": [2.0, 1.0]}}),
        _run(tmp_path, "b", "sign", 1, {5: {"w": [1.0, 0.0]}, 10: {"w": [2.0, 0.0]}, 15: {"w": [3.0, 0.0]}}),
        _run(tmp_path, "c", "dr_grpo", 0, {15: {"w": [0.0, 2.0]}}),
    ]


def test_cosines_and_norms_by_hand(full_runs: list[ReportedRun]) -> None:
    rows, _ = update_rows(full_runs, start={"w": torch.zeros(2)})
    values = _values(rows)
    assert values["a", "successive_cosine"] == pytest.approx(0.0)
    assert values["b", "successive_cosine"] == pytest.approx(1.0)
    assert values["a", "step_update_norm"] == pytest.approx(1.0)
    assert values["a", "update_norm"] == pytest.approx(math.sqrt(5))  # [2, 1]
    assert values["b", "update_norm"] == pytest.approx(3.0)
    assert values["a", "cross_seed_cosine"] == pytest.approx(6 / (3 * math.sqrt(5)))  # <[2,1], [3,0]>
    assert values["b", "cross_seed_cosine"] == values["a", "cross_seed_cosine"]
    assert values["a", "successive_noise_cosine"] == pytest.approx(np.mean(momentum_noise_cosines([5, 10, 15], 0.9)))


def test_a_nonzero_start_is_subtracted(full_runs: list[ReportedRun]) -> None:
    values = _values(update_rows(full_runs, start={"w": torch.tensor([1.0, 0.0])})[0])
    # a's updates from [1, 0]: [0, 0], [0, 1], [1, 0]; the zero first update has no cosine
    assert math.isnan(values["c", "successive_cosine"])
    assert values["a", "update_norm"] == pytest.approx(math.sqrt(2))  # [1, 1]
    assert values["b", "update_norm"] == pytest.approx(2.0)
    assert values["a", "cross_seed_cosine"] == pytest.approx(2 / (math.sqrt(2) * 2))


def test_a_run_with_one_pruned_checkpoint_is_not_measured_and_says_how_to_fix_it(
        full_runs: list[ReportedRun]) -> None:
    rows, notes = update_rows(full_runs, start={"w": torch.zeros(2)})
    values = _values(rows)
    assert not checkpoint_chain(full_runs[2]).first_is_regular
    assert math.isnan(values["c", "successive_cosine"]) and math.isnan(values["c", "cross_seed_cosine"])
    assert values["c", "update_norm"] == pytest.approx(2.0)  # the total update is still measured
    assert any("successive cosine of c" in n and "--keep-checkpoints 100" in n for n in notes), notes
    assert any("cross-seed cosine of dr_grpo G=2" in n for n in notes), notes
    assert not any(" a," in n or " a " in n for n in notes)


def test_a_run_without_checkpoints_gets_nan_rows_and_a_note(full_runs: list[ReportedRun], tmp_path: Path) -> None:
    bare = ReportedRun("old", "sign", 2, 2, 1e-3, tmp_path / "old", TrainConfig())
    rows, notes = update_rows([*full_runs, bare], start={"w": torch.zeros(2)})
    assert all(math.isnan(row["value"]) for row in rows if row["run_id"] == "old")
    assert any(n.startswith("not measured: old has no checkpoint") for n in notes)
    assert _values(rows)["a", "update_norm"] == pytest.approx(math.sqrt(5))


def test_adam_ratio_and_its_floor_by_hand(full_runs: list[ReportedRun]) -> None:
    values = _values(update_rows(full_runs, start={"w": torch.zeros(2)})[0])
    assert values["a", "adam_rms_ratio"] == pytest.approx(0.5)
    assert values["a", "adam_noise_floor"] == pytest.approx(1.0)  # t = 1: m̂ = g, v̂ = g²
    assert values["a", "adam_over_floor"] == pytest.approx(0.5)


def test_adam_is_also_read_at_every_kept_checkpoint(full_runs: list[ReportedRun]) -> None:
    rows, _ = update_rows(full_runs, start={"w": torch.zeros(2)})
    by_step = {(row["run_id"], row["phase"]): row["value"] for row in rows if row["phase"]}
    assert set(by_step) == {("a", "step 5"), ("a", "step 10"), ("a", "step 15"), ("b", "step 5"),
                            ("b", "step 10"), ("b", "step 15"), ("c", "step 15")}
    assert all(value == pytest.approx(0.5) for value in by_step.values())
    assert {row["measure"] for row in rows if row["phase"]} == {"adam_over_floor"}


def test_lora_updates_are_scale_times_ba_whatever_the_random_a(tmp_path: Path) -> None:
    a_name, b_name = "m.lora_A.default.weight", "m.lora_B.default.weight"
    lora = {"lora": True, "lora_r": 1, "lora_alpha": 2}  # scale 2
    runs = [  # BA = [[1, 0], [0, 0]] for both, from different A
        _run(tmp_path, "x", "sign", 0, {5: {a_name: [[2.0, 0.0]], b_name: [[0.5], [0.0]]}}, **lora),
        _run(tmp_path, "y", "sign", 1, {5: {a_name: [[1.0, 0.0]], b_name: [[1.0], [0.0]]}}, **lora),
    ]
    values = _values(update_rows(runs, start=None)[0])
    assert values["x", "update_norm"] == pytest.approx(2.0)
    assert values["x", "cross_seed_cosine"] == pytest.approx(1.0)


def test_the_noise_values_by_hand() -> None:
    assert adam_noise_floor(0.9, 1) == pytest.approx(1.0)
    assert adam_noise_floor(0.9, 10_000) == pytest.approx(math.sqrt(0.1 / 1.9))
    assert momentum_noise_cosines([5, 10], 0.0) == [pytest.approx(0.0)]  # no momentum: independent steps
    # stationary 5-step intervals (995, 1000], (1000, 1005]: sum_{i<5, j>=5} β^(j-i) / sum_{i,j<5} β^|i-j|
    # = 0.9 (1 + ... + 0.9^4)^2 / (5 + 2 (4·0.9 + 3·0.81 + 2·0.729 + 0.6561)) = 0.9 · 4.0951² / 21.2882
    assert momentum_noise_cosines([995, 1000, 1005], 0.9)[1] == pytest.approx(0.9 * 4.0951 ** 2 / 21.2882, abs=1e-5)


def test_the_noise_values_match_adamw_on_pure_noise() -> None:
    """AdamW fed zero-mean Gaussian gradients with a different scale per element, 20 steps, snapshots every 5."""
    torch.manual_seed(0)
    size = 20_000
    weights = torch.nn.Parameter(torch.zeros(size))
    optimizer = torch.optim.AdamW([weights], lr=1e-3, betas=BETAS, weight_decay=0.0)
    scale = torch.rand(size) * 3 + 0.1
    snapshots = [weights.detach().clone()]
    for step in range(1, 21):
        weights.grad = torch.randn(size) * scale
        optimizer.step()
        if step % 5 == 0:
            snapshots.append(weights.detach().clone())
    deltas = [after - before for before, after in itertools.pairwise(snapshots)]
    simulated = [float(torch.nn.functional.cosine_similarity(u, v, dim=0)) for u, v in itertools.pairwise(deltas)]
    assert simulated == pytest.approx(momentum_noise_cosines([5, 10, 15, 20], 0.9), abs=0.03)
    state = optimizer.state[weights]
    ratio, step = adam_rms_ratio({f"w/{k}": v for k, v in state.items()}, BETAS)
    assert step == 20 and ratio == pytest.approx(adam_noise_floor(0.9, 20), rel=0.03)


def test_a_constant_gradient_reaches_ratio_one() -> None:
    weights = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([weights], lr=1e-3, betas=BETAS, weight_decay=0.0)
    for _ in range(7):
        weights.grad = torch.tensor([1.0, -2.0, 0.5])
        optimizer.step()
    ratio, _ = adam_rms_ratio({f"w/{k}": v for k, v in optimizer.state[weights].items()}, BETAS)
    # AdamW keeps m and v in float32: 7 steps of ~3 roundings each (how many fuse depends on the CPU's kernels) put
    # each off by at most 21 eps in relative terms, and |m| / sqrt(v) by 1.5 times that; not pytest.approx's 1e-6.
    assert ratio == pytest.approx(1.0, rel=32 * torch.finfo(torch.float32).eps, abs=0)


def test_the_updates_section_and_terminal_lines(full_runs: list[ReportedRun]) -> None:
    rows, notes = update_rows(full_runs, start={"w": torch.zeros(2)})
    summary = summarise(pd.DataFrame(rows).assign(tokens=np.nan, completions=np.nan))
    text = markdown(summary, {"out": "cmp", "model": "embedded", "parts": ["updates"], "update_notes": notes},
                    None)
    assert "## 4. The update's geometry" in text and "## 1. Format" not in text
    sign_row = next(line for line in text.splitlines() if line.startswith("| sign |"))
    assert "0.500 [" in sign_row  # successive cosine: mean of a's 0 and b's 1
    dr_row = next(line for line in text.splitlines() if line.startswith("| dr_grpo |"))
    assert dr_row.count("not measured") == 4  # successive, its noise value, cross-seed, step norm (no interval)
    assert "successive cosine of c" in text
    assert any(line.startswith("sign G=2 updates: successive cosine 0.500") for line in update_lines(summary))
    assert "- sign G=2, Adam over its noise floor by checkpoint: step 5: 0.500, step 10: 0.500, step 15: 0.500" \
        in text


def test_parts_are_parsed_in_order_and_unknown_ones_fail() -> None:
    assert parse_parts("updates, passk") == ("passk", "updates")
    with pytest.raises(UserError, match="subset of format, tokens, passk, updates"):
        parse_parts("update")


def test_a_results_table_without_runs_fails_in_one_line(tmp_path: Path) -> None:
    pd.DataFrame().to_parquet(tmp_path / "results.parquet")  # what a sweep whose every run failed writes
    with pytest.raises(UserError, match=r"lists no run \(it has no run_id, estimator"):
        reported_runs(tmp_path)


def test_a_start_model_without_the_checkpoints_tensors_fails_in_one_line(full_runs: list[ReportedRun]) -> None:
    with pytest.raises(UserError, match="holds w, which the start model"):
        update_rows(full_runs, start={"other": torch.zeros(2)})


def _varied_comparison(out: Path) -> None:
    """A compare output with two variants of one estimator: seeds 0 and 1 of each, with saved configs."""
    from grpolab.config.files import save_config

    rows = []
    for variant, mask in (("mask_truncated_completions=false", False), ("mask_truncated_completions=true", True)):
        for seed in (0, 1):
            run_id = f"sign-G2-seed{seed}-{variant}"
            (out / "runs" / run_id).mkdir(parents=True)
            save_config(TrainConfig(seed=seed, mask_truncated_completions=mask), out / "runs" / run_id / "config.yaml")
            rows.append({"run_id": run_id, "variant": variant, "estimator": "sign", "group_size": 2, "seed": seed,
                         "lr": 1e-3})
    pd.DataFrame(rows).to_parquet(out / "results.parquet")


def test_variants_are_never_pooled(tmp_path: Path) -> None:
    _varied_comparison(tmp_path)
    with pytest.raises(UserError, match=r"compares 2 variants .* --variant 'mask_truncated_completions=false'"):
        reported_runs(tmp_path)
    chosen = reported_runs(tmp_path, variant="mask_truncated_completions=true")
    assert [run.seed for run in chosen] == [0, 1]
    assert all(run.config.mask_truncated_completions for run in chosen)
    with pytest.raises(UserError, match="has no variant 'mask=1'; its variants are"):
        reported_runs(tmp_path, variant="mask=1")


def test_the_cli_writes_one_variants_analysis_to_its_own_folder(tmp_path: Path, capsys) -> None:
    from grpolab.cli import main

    _varied_comparison(tmp_path)
    assert main(["mechanism", str(tmp_path), "--parts", "updates"]) == 2
    assert "--variant" in capsys.readouterr().err
    assert main(["mechanism", str(tmp_path), "--parts", "updates", "--variant",
                 "mask_truncated_completions=true"]) == 0
    written = pd.read_csv(tmp_path / "mechanism" / "mask_truncated_completions=true" / "mechanism_runs.csv")
    assert set(written["run_id"]) == {"sign-G2-seed0-mask_truncated_completions=true",
                                      "sign-G2-seed1-mask_truncated_completions=true"}
    assert not (tmp_path / "mechanism.csv").exists()


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40  # a bit of the last value's exponent: before, update_norm became 2.4e37, exit 0
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flipped bit", "truncated weights", "truncated optimizer", "no checksums"])
def test_a_damaged_checkpoint_is_refused_in_one_line(full_runs: list[ReportedRun], damage: str) -> None:
    checkpoint = full_runs[0].run_dir / "checkpoints" / "step-000010"
    if damage == "flipped bit":
        _flip_a_bit(checkpoint / "weights.safetensors")
    elif damage == "no checksums":
        (checkpoint / "checksums.json").unlink()
    else:
        name = "weights.safetensors" if "weights" in damage else "optimizer.safetensors"
        (checkpoint / name).write_bytes((checkpoint / name).read_bytes()[:40])
    with pytest.raises(UserError, match=rf"checkpoint {checkpoint} of run a is damaged") as caught:
        update_rows(full_runs, start=None)
    assert "\n" not in str(caught.value)


def test_a_torn_results_table_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    from grpolab.cli import main

    _varied_comparison(tmp_path)
    table = tmp_path / "results.parquet"
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])  # a full disk during an in-place write
    with pytest.raises(UserError, match=rf"{table} cannot be read .*rerun grpolab compare --out"):
        reported_runs(tmp_path)
    assert main(["mechanism", str(tmp_path), "--parts", "updates"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
