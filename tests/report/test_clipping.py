"""How often clipping acted per arm (grpolab.report.clipping): logged ``loss/clipped``, or inferred from the
pre-clip ``loss/grad_norm`` in older metrics, and the verdict's sentence when the shares differ a lot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from grpolab.report.clipping import clipping_lines, clipping_section, clipping_table
from report_sweeps import STEPS, synthetic_sweep

pytestmark = pytest.mark.fast


def _metrics(clipped_steps: dict[str, int]) -> pd.DataFrame:
    """Metrics of a sign / dr_grpo sweep whose runs were clipped on their first clipped_steps[estimator] steps."""
    _, metrics, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    clipped = metrics["step"] <= metrics["estimator"].map(clipped_steps)
    return metrics.assign(**{"loss/clipped": clipped.astype(float), "loss/grad_norm": np.where(clipped, 2.5, 0.5)})


def test_logged_shares_and_the_verdict_sentence() -> None:
    metrics = _metrics({"sign": 39, "dr_grpo": 5})  # 39 / 60 = 65%, 5 / 60 = 8%
    table, source = clipping_table(metrics, {})
    assert source == "logged (loss/clipped)"
    assert list(table["estimator"]) == ["sign", "dr_grpo"]
    assert table["clipped_share"].tolist() == pytest.approx([39 / STEPS, 5 / STEPS])
    assert table["median_norm"].tolist() == pytest.approx([2.5, 0.5])
    assert clipping_lines(metrics, {}) == [
        "G = 2: gradient clipping (max_grad_norm = 1) acted on 65% of sign's steps but 8% of dr_grpo's: their steps "
        "differ in size beyond what the advantages give, and the comparison includes that effect (see Gradient "
        "clipping)."]
    assert clipping_lines(_metrics({"sign": 10, "dr_grpo": 5}), {}) == []  # 17% vs 8%: not a large gap


def test_older_metrics_infer_clipping_from_the_pre_clip_norm() -> None:
    metrics = _metrics({"sign": 39, "dr_grpo": 5}).drop(columns=["loss/clipped"])
    table, source = clipping_table(metrics, {"train": {"max_grad_norm": 1.0}})
    assert source == "inferred (loss/grad_norm > 1)"
    assert table["clipped_share"].tolist() == pytest.approx([39 / STEPS, 5 / STEPS])
    table, _ = clipping_table(metrics, {"train": {"max_grad_norm": 3.0}})  # no norm above 3: nothing clipped
    assert table["clipped_share"].tolist() == [0.0, 0.0]
    assert clipping_table(metrics, {"train": {"max_grad_norm": 0.0}})[0].empty  # clipping was off


def test_no_section_without_gradient_norms() -> None:
    metrics = _metrics({"sign": 1, "dr_grpo": 1}).drop(columns=["loss/clipped", "loss/grad_norm"])
    assert clipping_section(metrics, {}) is None and clipping_section(None, {}) is None
    assert clipping_lines(metrics, {}) == []
    section = clipping_section(_metrics({"sign": 39, "dr_grpo": 5}), {})
    assert section is not None and list(section.tables[0][1]["Clipped steps"]) == ["65%", "8%"]
