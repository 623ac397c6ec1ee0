"""`grpolab compare --backend ray` on a local Ray started on the CPU (skipped without the ray extra)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from grpolab.cli import main

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'grpolab[ray]'")


def test_ray_backend_runs_a_small_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "cmp"
    try:
        code = main(["compare", "--backend", "ray", "--workers", "2", "--estimators", "sign,dr_grpo", "--seeds", "1",
                     "--group-sizes", "2", "--steps", "2", "--prompts-per-step", "4", "--eval-limit", "8",
                     "--eval-samples", "2", "--lrs", "1e-3", "--out", str(out), "--no-report"])
    finally:
        ray.shutdown()
    assert code == 0
    results = pd.read_parquet(out / "results.parquet")
    assert sorted(results["run_id"].unique()) == ["dr_grpo-G2-seed0", "sign-G2-seed0"]
    assert results.groupby(["run_id", "phase"]).size().eq(1).all()
