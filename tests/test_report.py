"""The compare report: summary numbers by hand, self-contained HTML, Markdown tables, degenerate inputs,
and (when chromium is installed) a headless-browser render."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpolab.diagnostics import iid_degeneracy, pass_at_k_curve
from grpolab.errors import UserError
from grpolab.report import summary_table, write_report
from grpolab.report_render import chromium_command, screenshot
from grpolab.report_tables import equal_cost_table, jensen_table

# Final score (pass@1 = greedy accuracy here) per (estimator, G) and seed: the hand-computed means below come
# from these.
FINALS = {
    ("sign", 2): [0.70, 0.74, 0.78],
    ("sign", 4): [0.76, 0.80, 0.78],
    ("dr_grpo", 2): [0.28, 0.30, 0.32],
    ("dr_grpo", 4): [0.30, 0.26, 0.31],
    ("grpo", 2): [0.29, 0.33, 0.34],
    ("grpo", 4): [0.31, 0.30, 0.35],
    ("dr_grpo+dynamic", 2): [0.50, 0.46, 0.54],
    ("dr_grpo+dynamic", 4): [0.60, 0.52, 0.56],
}
START_ACCURACY = 0.25
N_SAMPLES, N_PROMPTS, STEPS, PROMPTS_PER_STEP = 16, 40, 60, 8
EVAL_STEPS = (20, 40)


def _success_rates(rng: np.random.Generator, accuracy: float) -> np.ndarray:
    """Bimodal per-prompt success rates [P] (mass at 0 and 1, like the paper's Fig. 2), mean ~accuracy."""
    kind = rng.choice(3, size=N_PROMPTS, p=[max(0.05, 0.8 - accuracy), 0.2, min(0.75, accuracy)])
    return np.where(kind == 0, 0.0, np.where(kind == 2, 1.0, rng.uniform(0.1, 0.9, N_PROMPTS)))


def _evaluation(rng: np.random.Generator, base: dict, phase: str, step: int, accuracy: float) -> dict:
    successes = rng.binomial(N_SAMPLES, _success_rates(rng, accuracy))
    curve = pass_at_k_curve(N_SAMPLES, successes)
    cost = 1.6 if "+dynamic" in base["estimator"] else 1.0
    return {
        **base,
        "phase": phase,
        "step": step,
        "greedy_accuracy": accuracy,
        "n": N_SAMPLES,
        "completions_generated": int(step * PROMPTS_PER_STEP * base["group_size"] * cost),
        # pass@1 (the report's score) is the planned accuracy exactly, so the hand-computed means hold
        "pass_at_k": [accuracy, *list(curve.values())[1:]],
        "successes": successes.tolist(),
        "mean_length": 120.0,
    }


def _metrics_rows(rng: np.random.Generator, base: dict, final: float, with_rank: bool) -> list[dict]:
    rows, size = [], base["group_size"]
    cost = 1.6 if "+dynamic" in base["estimator"] else 1.0
    for step in range(1, STEPS + 1):
        progress = START_ACCURACY + (final - START_ACCURACY) * (1 - np.exp(-step / 15))
        rates = _success_rates(rng, float(np.clip(progress + rng.normal(0, 0.03), 0.01, 0.99)))  # [P]
        pbar, all_wrong, all_correct = rates.mean(), np.mean((1 - rates) ** size), np.mean(rates**size)
        row = {
            **{k: base[k] for k in ("run_id", "estimator", "seed", "group_size")},
            "step": step,
            "rollout/reward_mean": pbar,
            "rollout/accuracy": pbar,
            "rollout/completions_generated": int(step * PROMPTS_PER_STEP * size * cost),
            "starvation/all_wrong": all_wrong,
            "starvation/all_correct": all_correct,
            "starvation/degenerate": all_wrong + all_correct,
            "starvation/d_iid": pbar**size + (1 - pbar) ** size,
            "loss/grad_norm": 1.0,
            "perf/step_time": 0.5,
        }
        if with_rank:
            zero_sum = base["estimator"].split("+")[0] in ("grpo", "dr_grpo", "rloo")
            tracked = step % 10 == 0
            rank = (1.9 if zero_sum else 1.5 + size) + rng.normal(0, 0.05)
            row["grad/effective_rank"] = rank if tracked else np.nan
        rows.append(row)
    return rows


def synthetic_sweep(
    estimators: tuple[str, ...] = ("sign", "dr_grpo", "grpo"),
    seeds: int = 3,
    sizes: tuple[int, ...] = (2, 4),
    with_rank: bool = False,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Results, metrics and config of a fake sweep; final accuracies from FINALS, start accuracy 0.25."""
    rng = np.random.default_rng(seed)
    results, metrics = [], []
    for estimator in estimators:
        for size in sizes:
            for s in range(seeds):
                final = FINALS[(estimator, size)][s]
                base = {
                    "run_id": f"{estimator}-G{size}-s{s}",
                    "estimator": estimator,
                    "seed": s,
                    "group_size": size,
                    "task": "arith",
                    "model": "tiny",
                    "steps": STEPS,
                }
                results.append(_evaluation(rng, base, "start", 0, START_ACCURACY))
                for step in EVAL_STEPS:
                    middle = START_ACCURACY + (final - START_ACCURACY) * step / STEPS
                    results.append(_evaluation(rng, base, "step", step, middle))
                results.append(_evaluation(rng, base, "end", STEPS, final))
                metrics += _metrics_rows(rng, base, final, with_rank)
    config = {
        "name": "synthetic",
        "estimators": list(estimators),
        "seeds": seeds,
        "group_sizes": list(sizes),
        "steps": STEPS,
        "eval": {"n": N_SAMPLES},
    }
    return pd.DataFrame(results), pd.DataFrame(metrics), config


def _img_sources(page: str) -> list[str]:
    return re.findall(r'<img [^>]*src="([^"]+)"', page)


def _assert_valid_pngs(page: str, expected: int) -> None:
    sources = _img_sources(page)
    assert len(sources) == expected
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        data = base64.b64decode(source.split(",", 1)[1], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000


def test_summary_table_matches_hand_computation() -> None:
    results, _, _ = synthetic_sweep()
    table = summary_table(results).set_index(["estimator", "group_size"])
    assert list(table.index.get_level_values(0)[:3]) == ["sign", "dr_grpo", "grpo"]  # paper order
    sign2 = table.loc[("sign", 2)]
    assert sign2["n_seeds"] == 3
    assert sign2["final_accuracy"] == pytest.approx((0.70 + 0.74 + 0.78) / 3)
    assert sign2["start_accuracy"] == pytest.approx(0.25)
    assert sign2["change"] == pytest.approx(0.74 - 0.25)
    assert 0.70 - 1e-9 <= sign2["ci_low"] <= sign2["final_accuracy"] <= sign2["ci_high"] <= 0.78 + 1e-9
    assert table.loc[("dr_grpo", 4), "final_accuracy"] == pytest.approx((0.30 + 0.26 + 0.31) / 3)
    ends = results[(results["phase"] == "end") & (results["estimator"] == "grpo") & (results["group_size"] == 4)]
    assert table.loc[("grpo", 4), "pass@1"] == pytest.approx(np.mean([p[0] for p in ends["pass_at_k"]]))
    assert table.loc[("grpo", 4), "pass@n"] == pytest.approx(np.mean([p[-1] for p in ends["pass_at_k"]]))
    assert table.loc[("grpo", 4), "completions"] == STEPS * PROMPTS_PER_STEP * 4


def test_jensen_table_hand_computed() -> None:
    # One prompt always right, one never: D_real = 1 at every G, pbar = 1/2 so D_iid = 2 * 2^-G.
    results, _, _ = synthetic_sweep(estimators=("sign",), seeds=1, sizes=(2,))
    starts = results["phase"] == "start"
    results.loc[starts, "successes"] = pd.Series([[N_SAMPLES, 0]] * int(starts.sum()), index=results.index[starts])
    table = jensen_table(results, pd.DataFrame())
    assert table.loc[0, "d_real_eval"] == pytest.approx(1.0)
    assert table.loc[0, "d_iid_eval"] == pytest.approx(0.5)
    assert np.isnan(table.loc[0, "d_real_train"])


def test_jensen_table_training_d_iid_pools_p_mean_over_the_first_steps() -> None:
    # one prompt per step, alternately always right and never: per-step D_iid would be 1, pooled pbar = 1/2
    results, _, _ = synthetic_sweep(estimators=("sign",), seeds=1, sizes=(2,))
    metrics = pd.DataFrame(
        {
            "run_id": "r", "estimator": "sign", "group_size": 2, "step": [1, 2, 3, 4, 5, 6],
            "starvation/p_mean": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0], "starvation/uniform": 1.0,
            "starvation/degenerate": 0.0, "starvation/d_iid": 1.0,
        }
    )
    table = jensen_table(results, metrics)
    assert table.loc[0, "d_real_train"] == 1.0  # the uniform share, not sign's zero degenerate share
    assert table.loc[0, "d_iid_train"] == pytest.approx(iid_degeneracy(3 / 5, 2))  # pbar of steps 1-5


BASE_SECTIONS = (
    "Summary",
    "Final accuracy",
    "Statistics",
    "Starting policy and the Jensen gap",
    "pass@k",
    "Training dynamics",
    "Configuration",
)
FULL_ESTIMATORS = ("sign", "dr_grpo", "dr_grpo+dynamic")


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Report of a sweep with dynamic sampling and gradient-rank tracking: (out_dir, html, markdown)."""
    out_dir = tmp_path_factory.mktemp("full")
    results, metrics, config = synthetic_sweep(FULL_ESTIMATORS, with_rank=True)
    html_path, md_path = write_report(out_dir, results, metrics, config)
    return out_dir, html_path, md_path


def _assert_report(out_dir: Path, page: str, markdown: str, sections: tuple[str, ...], figures: int) -> None:
    for title in sections:
        assert f">{title}</h2>" in page and f"## {title}\n" in markdown
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script" not in page and "<link" not in page
    _assert_valid_pngs(page, figures)
    linked = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", markdown)
    assert len(linked) == figures and all((out_dir / link).stat().st_size > 5_000 for link in linked)


def test_full_report_is_complete_and_self_contained(full_report: tuple[Path, Path, Path]) -> None:
    out_dir, html_path, md_path = full_report
    page, markdown = html_path.read_text(), md_path.read_text()
    extra = ("Equal sampling cost", "Gradient effective rank")
    _assert_report(out_dir, page, markdown, BASE_SECTIONS + extra, figures=6)
    assert "| sign | 2 | 3 | 25.0% | 74.0% | [" in markdown  # start, then the mean of 0.70, 0.74, 0.78
    assert "| dr_grpo | 4 | 3 | 25.0% | 29.0% | [" in markdown  # mean of 0.30, 0.26, 0.31
    assert "| dr_grpo+dynamic | 2 | 3 | 25.0% | 50.0% | [" in markdown  # mean of 0.50, 0.46, 0.54
    assert "G = 2: sign > dr_grpo by 44.0 points (Holm-adjusted Welch p = " in markdown
    assert "With n = 3 vs 3 seeds the exact permutation test cannot go below p = 0.1" in markdown  # 2 / 20
    budget = f"| dr_grpo+dynamic | 4 | 3 | {int(STEPS * PROMPTS_PER_STEP * 4 * 1.6):,} | 56.0% | 1,920 |"
    assert budget in markdown  # dynamic sampling used 1.6x the completions; budget = the others' total
    assert "G = 4, at equal sampling cost (1,920 completions): sign 78.0%, dr_grpo 29.0%, dr_grpo+dynamic" in markdown
    assert "max-width:100%" in page and "overflow-x:auto" in page


def test_plain_report_has_no_dynamic_or_rank_sections(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(("sign", "grpo"), seeds=2, sizes=(2,))
    html_path, md_path = write_report(tmp_path, results, metrics, config)
    page, markdown = html_path.read_text(), md_path.read_text()
    _assert_report(tmp_path, page, markdown, BASE_SECTIONS, figures=4)
    assert "Equal sampling cost" not in page and "Gradient effective rank" not in page
    assert "| grpo | 2 | 2 | 25.0% | 31.0% | [" in markdown  # mean of 0.29, 0.33


def test_single_seed_claims_no_p_values(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(seeds=1, sizes=(2,))
    html_path, md_path = write_report(tmp_path, results, metrics, config)
    markdown = md_path.read_text()
    assert "| sign | 2 | 1 | 25.0% | 70.0% | n/a (n = 1) |" in markdown
    assert "no p-values are claimed" in markdown and "Holm-adjusted Welch p = " not in markdown
    _assert_valid_pngs(html_path.read_text(), 4)


def test_missing_and_empty_metrics_still_write_a_report(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(estimators=("sign", "dr_grpo+dynamic"), seeds=2, sizes=(2,))
    thin = metrics.drop(columns=["starvation/degenerate", "starvation/d_iid", "rollout/completions_generated"])
    _, md_path = write_report(tmp_path / "thin", results, thin, config)
    markdown = md_path.read_text()
    assert "No starvation/degenerate metric" in markdown and "rollout/completions_generated was not" in markdown
    for name, empty in (("empty", pd.DataFrame()), ("none", None)):
        html_path, md_path = write_report(tmp_path / name, results, empty, config)
        assert "No training metrics were recorded." in md_path.read_text()
        _assert_valid_pngs(html_path.read_text(), 3)  # accuracy, start policy, pass@k; no dynamics


def test_parquet_round_trip_and_partial_evaluations(tmp_path: Path) -> None:
    """As the sweep saves them: list columns come back as numpy arrays; one run lacks its start evaluation
    and the start evaluations hold no pass@k (n = 0 samples)."""
    results, metrics, config = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    starts = results["phase"] == "start"
    results.loc[starts, "pass_at_k"] = pd.Series([[]] * int(starts.sum()), index=results.index[starts])
    results = results[~(starts & (results["run_id"] == "sign-G2-s0"))]
    results.to_parquet(tmp_path / "results.parquet", index=False)
    metrics.to_parquet(tmp_path / "metrics.parquet", index=False)
    results, metrics = pd.read_parquet(tmp_path / "results.parquet"), pd.read_parquet(tmp_path / "metrics.parquet")
    html_path, md_path = write_report(tmp_path, results, metrics, config)
    assert "| sign | 2 | 2 | 25.0% | 72.0% | [" in md_path.read_text()  # mean of 0.70, 0.74
    _assert_valid_pngs(html_path.read_text(), 4)
    assert summary_table(results).loc[0, "start_accuracy"] == pytest.approx(0.25)


def test_equal_cost_table_with_only_end_evaluations() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo+dynamic"), seeds=2, sizes=(2,))
    table = equal_cost_table(results[results["phase"] != "step"]).set_index("estimator")
    assert table.loc["sign", "budget"] == STEPS * PROMPTS_PER_STEP * 2  # what the plain runs used
    assert table.loc["sign", "accuracy_at_budget"] == pytest.approx(0.72)  # its end evaluation fits
    assert np.isnan(table.loc["dr_grpo+dynamic", "accuracy_at_budget"])  # only its start fits: no claim
    assert table.loc["dr_grpo+dynamic", "completions_end"] == int(STEPS * PROMPTS_PER_STEP * 2 * 1.6)


def test_results_without_end_evaluation_is_a_clear_error(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(seeds=1, sizes=(2,))
    with pytest.raises(UserError, match="no 'end' evaluation"):
        write_report(tmp_path, results[results["phase"] != "end"], metrics, config)


needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium not installed (CI: apt-get install -y chromium)"
)


@needs_chromium
def test_report_renders_in_headless_chromium(full_report: tuple[Path, Path, Path]) -> None:
    out_dir, html_path, _ = full_report
    png = screenshot(html_path, out_dir / "page.png", width=1280, height=2000)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000  # a blank page is a few kB
    dom = subprocess.run(
        chromium_command("--dump-dom", html_path.as_uri()),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert len(re.findall(r"<img ", dom)) == 6 and dom.count("data:image/png;base64,") == 6
    assert "figure img{max-width:100%" in dom and ".table-wrap{overflow-x:auto" in dom
