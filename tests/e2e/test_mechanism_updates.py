"""`grpolab mechanism`'s updates part on a tiny real `grpolab compare` (2 estimators x 2 seeds, 4 steps, a
checkpoint every 2 steps): its numbers agree with the checkpoints read directly, and a run whose checkpoints
are gone gets a "not measured" note instead of a crash."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from grpolab.cli import main
from grpolab.mechanism.updates import adam_noise_floor, momentum_noise_cosines
from grpolab.models import load_policy
from in_process_workers import workers_in_process


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("updates") / "cmp"
    with workers_in_process():  # what mechanism reads is under test, not the sweep's workers
        code = main(["compare", "--estimators", "sign,dr_grpo", "--seeds", "2", "--group-sizes", "2", "--workers", "2",
                     "--out", str(out), "--lr", "1e-3", "--steps", "4", "--prompts-per-step", "4", "--eval-limit", "4",
                     "--eval-samples", "2", "--checkpoint-every", "2", "--keep-checkpoints", "10", "--no-report"])
    assert code == 0
    assert main(["mechanism", str(out), "--prompts", "4", "--samples", "2"]) == 0
    return out


def _updates(out: Path) -> pd.DataFrame:
    per_run = pd.read_csv(out / "mechanism_runs.csv", keep_default_na=False, na_values=[""])
    run_level = per_run[(per_run["part"] == "updates") & (per_run["phase"].fillna("") == "")]
    return run_level.pivot(index="run_id", columns="measure", values="value")


def _weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / f"step-{step:06d}" / "weights.safetensors"))


def _flat(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([tensors[name].double().flatten() for name in sorted(tensors)])


def test_every_part_is_written_and_the_updates_section_is_there(compared: Path) -> None:
    text = (compared / "mechanism.md").read_text()
    for heading in ("## 1. Format breakage", "## 2. Per-token change", "## 3. pass@k", "## 4. The update's geometry"):
        assert heading in text
    updates = _updates(compared)
    assert len(updates) == 4 and updates.notna().all().all(), updates


def test_the_numbers_are_the_checkpoints(compared: Path) -> None:
    updates = _updates(compared)
    base = dict(load_policy("embedded").model.named_parameters())
    totals = {}
    for run_id in updates.index:
        run_dir = compared / "runs" / run_id
        names = sorted(_weights(run_dir, 2))
        start = _flat({name: base[name].detach() for name in names})
        two, four = _flat(_weights(run_dir, 2)), _flat(_weights(run_dir, 4))
        first, second = two - start, four - two
        totals[run_id] = four - start
        assert updates.loc[run_id, "update_norm"] == pytest.approx(float(totals[run_id].norm()), rel=1e-6)
        cosine = float(first @ second / (first.norm() * second.norm()))
        assert updates.loc[run_id, "successive_cosine"] == pytest.approx(cosine, abs=1e-6)
        assert updates.loc[run_id, "step_update_norm"] == pytest.approx(float((first.norm() + second.norm()) / 2))
    for a, b in (("sign-G2-seed0", "sign-G2-seed1"), ("dr_grpo-G2-seed0", "dr_grpo-G2-seed1")):
        cosine = float(totals[a] @ totals[b] / (totals[a].norm() * totals[b].norm()))
        assert updates.loc[a, "cross_seed_cosine"] == pytest.approx(cosine, abs=1e-6)
    assert np.allclose(updates["successive_noise_cosine"], momentum_noise_cosines([2, 4], 0.9)[0])
    assert np.allclose(updates["adam_noise_floor"], adam_noise_floor(0.9, 4))
    ratio = updates["adam_rms_ratio"] / updates["adam_noise_floor"]
    assert (updates["adam_over_floor"] - ratio).abs().max() < 1e-9
    per_run = pd.read_csv(compared / "mechanism_runs.csv", keep_default_na=False, na_values=[""])
    last = per_run[(per_run["part"] == "updates") & (per_run["phase"] == "step 4")].set_index("run_id")["value"]
    assert np.allclose(last.sort_index(), updates["adam_over_floor"].sort_index())  # step 4 is the last one
    assert set(per_run[per_run["part"] == "updates"]["phase"].fillna("")) == {"", "step 2", "step 4"}


def test_a_run_without_checkpoints_is_not_measured_and_the_rest_is(
        compared: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(compared, copy, ignore=shutil.ignore_patterns("mechanism*"))
    shutil.rmtree(copy / "runs" / "sign-G2-seed1" / "checkpoints")
    assert main(["mechanism", str(copy), "--parts", "updates"]) == 0
    text = (copy / "mechanism.md").read_text()
    assert "- not measured: sign-G2-seed1 has no checkpoint" in text and "--keep-checkpoints 100" in text
    assert not (copy / "mechanism.png").exists()
    updates = _updates(copy)
    assert updates.loc["sign-G2-seed1"].isna().all()
    assert updates.loc["sign-G2-seed0", "update_norm"] == pytest.approx(_updates(compared).loc["sign-G2-seed0",
                                                                                               "update_norm"])
    assert "## 1. Format" not in text
