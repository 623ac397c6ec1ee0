"""The compare report as a whole (grpolab.report): self-contained HTML, Markdown tables, degenerate inputs,
and (when chromium is installed) a headless-browser render. The numbers by hand: test_report_tables.py."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from grpolab.advantages import info
from grpolab.errors import UserError
from grpolab.render import chromium_command
from grpolab.report import screenshot, summary_table, write_report
from grpolab.report.families import families_section
from grpolab.report.sections import figure_png
from grpolab.report.verdict import DETAIL, verdict_sections
from report_sweeps import N_PROMPTS, N_SAMPLES, PROMPTS_PER_STEP, STEPS, synthetic_sweep


def _img_sources(page: str) -> list[str]:
    return re.findall(r'<img [^>]*src="([^"]+)"', page)


def _assert_valid_pngs(page: str, expected: int) -> None:
    sources = _img_sources(page)
    assert len(sources) == expected
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        data = base64.b64decode(source.split(",", 1)[1], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000


BASE_SECTIONS = (
    "Verdict",
    "The verdict in detail",
    "Summary",
    "Final accuracy",
    "Statistics",
    "Starting policy and the Jensen gap",
    "pass@k",
    "Paired pass@k",
    "Learning curves",
    "Training dynamics",
    "Methods",
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
    """Every section in ``sections`` is there, in that order in both files (others may sit between them)."""
    for title in sections:
        assert f">{title}</h2>" in page and f"## {title}\n" in markdown
    assert [page.index(f">{title}</h2>") for title in sections] == sorted(page.index(f">{t}</h2>") for t in sections)
    assert [markdown.index(f"## {t}\n") for t in sections] == sorted(markdown.index(f"## {t}\n") for t in sections)
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script" not in page and "<link" not in page
    _assert_valid_pngs(page, figures)
    linked = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", markdown)
    assert len(linked) == figures and all((out_dir / link).stat().st_size > 5_000 for link in linked)


def test_full_report_is_complete_and_self_contained(full_report: tuple[Path, Path, Path]) -> None:
    out_dir, html_path, md_path = full_report
    page, markdown = html_path.read_text(), md_path.read_text()
    extra = ("Equal sampling cost", "Gradient effective rank")
    _assert_report(out_dir, page, markdown, BASE_SECTIONS[:-2] + extra + BASE_SECTIONS[-2:], figures=9)
    assert "| sign | 2 | 3 | 25.0% | 74.0% | [" in markdown  # start, then the mean of 0.70, 0.74, 0.78
    assert "| dr_grpo | 4 | 3 | 25.0% | 29.0% | [" in markdown  # mean of 0.30, 0.26, 0.31
    assert "| dr_grpo+dynamic | 2 | 3 | 25.0% | 50.0% | [" in markdown  # mean of 0.50, 0.46, 0.54
    # paired by seed: sign - dr_grpo per seed is 0.42, 0.44, 0.46 (mean 0.44, sd 0.02, t_{2, 0.975} = 4.303)
    # ... but three seeds cannot carry the t-test's p = 0.0007: it is raised to 2 / 2^3, what an exact test can give
    assert "G = 2 (primary): on pass@1, no evidence either way at this n (sign - dr_grpo = +44.0 points, unadjusted " \
           "95% CI [+39.0 points, +49.0 points], paired t (floored) p = 0.25" in markdown
    # dr_grpo+dynamic - dr_grpo per seed is 0.22, 0.16, 0.22: the interval of the larger minus the smaller
    assert "G = 2: on pass@1, no evidence either way at this n (dr_grpo - dr_grpo+dynamic = -20.0 points, unadjusted " \
           "95% CI [-28.6 points, -11.4 points], paired t (floored) p = 0.25" in markdown
    assert "With n = 3 vs 3 seeds the exact permutation test cannot go below p = 0.1" in markdown  # 2 / 20
    budget = f"| dr_grpo+dynamic | 4 | 3 | {int(STEPS * PROMPTS_PER_STEP * 4 * 1.6):,} | 56.0% | 1,920 |"
    assert budget in markdown  # dynamic sampling used 1.6x the completions; budget = the others' total
    assert "G = 4, at equal sampling cost (1,920 completions): sign 78.0%, dr_grpo 29.0%, dr_grpo+dynamic" in markdown
    assert "max-width:100%" in page and "overflow-x:auto" in page


def test_plain_report_has_no_dynamic_or_rank_sections(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(("sign", "grpo"), seeds=2, sizes=(2,))
    html_path, md_path = write_report(tmp_path, results, metrics, config)
    page, markdown = html_path.read_text(), md_path.read_text()
    _assert_report(tmp_path, page, markdown, BASE_SECTIONS, figures=7)
    assert "Equal sampling cost" not in page and "Gradient effective rank" not in page
    assert "| grpo | 2 | 2 | 25.0% | 31.0% | [" in markdown  # mean of 0.29, 0.33
    papers = f"Estimators' papers: sign: {info('sign').paper.citation}; grpo: {info('grpo').paper.citation}."
    assert papers in markdown  # from the registry, in display order


def test_single_seed_claims_no_p_values(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(seeds=1, sizes=(2,))
    html_path, md_path = write_report(tmp_path, results, metrics, config)
    markdown = md_path.read_text()
    assert "| sign | 2 | 1 | 25.0% | 70.0% | n/a (n = 1) |" in markdown
    assert "no p-values are claimed" in markdown and "paired t p = " not in markdown and "Welch p = " not in markdown
    _assert_valid_pngs(html_path.read_text(), 6)


def test_missing_and_empty_metrics_still_write_a_report(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(estimators=("sign", "dr_grpo+dynamic"), seeds=2, sizes=(2,))
    thin = metrics.drop(columns=["starvation/degenerate", "starvation/d_iid", "rollout/completions_generated"])
    _, md_path = write_report(tmp_path / "thin", results, thin, config)
    markdown = md_path.read_text()
    assert "No starvation/degenerate metric" in markdown and "rollout/completions_generated was not" in markdown
    for name, empty in (("empty", pd.DataFrame()), ("none", None)):
        html_path, md_path = write_report(tmp_path / name, results, empty, config)
        assert "No training metrics were recorded." in md_path.read_text()
        _assert_valid_pngs(html_path.read_text(), 6)  # 5 of them and paired pass@k; no dynamics


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
    _assert_valid_pngs(html_path.read_text(), 7)
    assert summary_table(results).loc[0, "start_accuracy"] == pytest.approx(0.25)


def test_results_without_end_evaluation_is_a_clear_error(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(seeds=1, sizes=(2,))
    with pytest.raises(UserError, match="no 'end' evaluation"):
        write_report(tmp_path, results[results["phase"] != "end"], metrics, config)


def _with_families(results: pd.DataFrame, families: list[str], start: dict[str, int], end: dict[str, int]
                   ) -> pd.DataFrame:
    """``results`` with each problem in ``families`` ([P]) solved start[family] / end[family] times of n."""
    results = results.copy()
    results["families"] = [families] * len(results)
    results["successes"] = [[(start if phase == "start" else end)[f] for f in families] for phase in results["phase"]]
    return results


def _verdict(results: pd.DataFrame) -> str:
    detail = next(s for s in verdict_sections(results, None, None, None, figure_png) if s.title == DETAIL)
    return "\n".join(detail.bullets)


def test_verdict_of_a_task_without_families_says_nothing_of_families() -> None:
    """Every problem of a task without families is in the family "": there is no family split to report."""
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    results = _with_families(results, [""] * N_PROMPTS, {"": 2}, {"": 10})
    verdict = _verdict(results)
    assert "sign has the highest mean held-out pass@1, 25.0% -> " in verdict  # the line names its metric
    assert "Where the gain sits" not in verdict and "n/a" not in verdict
    assert families_section(results) is None


def test_verdict_says_where_the_gain_sits_across_the_50_percent_split() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    families = ["hard"] * (N_PROMPTS // 2) + ["easy"] * (N_PROMPTS // 2)
    results = _with_families(results, families, {"hard": 0, "easy": 12}, {"hard": 4, "easy": 16})
    assert ("Where the gain sits (G = 2, change of held-out success in the families that started below 50% vs at "
            "or above): sign +25.0 points vs +25.0 points; dr_grpo +25.0 points vs +25.0 points.") in _verdict(results)
    one_sided = _with_families(results, families, {"hard": 0, "easy": 4}, {"hard": 8, "easy": 4})
    verdict = _verdict(one_sided)
    assert ("Where the gain sits (G = 2): every prompt family started below 50% held-out success, so there is no "
            "split; the change in them: sign +25.0 points; dr_grpo +25.0 points.") in verdict  # (50% + 0) / 2
    assert "n/a" not in verdict and "vs" not in verdict.split("Where the gain sits")[1]
    assert N_SAMPLES == 16  # the hand-computed changes above: 4 / 16 = 25 points, 8 / 16 = 50 points


def test_the_family_section_names_the_seeds_that_lack_per_prompt_successes() -> None:
    """A seed whose end evaluation lost its per-prompt successes (restored from an older summary.json) is named
    below the table, whose mean for its arm then rests on the other seed (before: averaged fewer seeds silently)."""
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    families = ["hard"] * (N_PROMPTS // 2) + ["easy"] * (N_PROMPTS // 2)
    results = _with_families(results, families, {"hard": 0, "easy": 12}, {"hard": 4, "easy": 16})
    whole = families_section(results)
    assert whole is not None and "Left out" not in whole.paragraphs[0]
    lost = results["phase"].eq("end") & results["estimator"].eq("sign") & results["seed"].eq(1)
    results.loc[lost, "successes"] = pd.Series([[]] * int(lost.sum()), index=results.index[lost])
    section = families_section(results)
    assert section is not None
    assert "Left out for want of per-prompt successes (so those means average fewer seeds): sign G=2 seed 1 (end)" \
        in section.paragraphs[0]
    assert section.tables[0][1].equals(whole.tables[0][1])  # seed 0 alone gives the same rates here


def test_verdict_of_sign_against_the_group_centred_estimators_is_plain_english() -> None:
    few, _, _ = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=3, sizes=(4,))
    assert ": no evidence either way at this n against grpo (" in _verdict(few)  # 3 seeds: p >= 1/4
    results, _, _ = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=8, sizes=(4,))
    verdict = _verdict(results)  # dr_grpo is the primary pair's; grpo is secondary
    assert "G = 4, secondary: sign against the group-centred estimators on pass@1: vs grpo +" in verdict
    assert ": sign is significantly better than grpo (n = 8 seeds of sign)." in verdict  # 8 seeds: p >= 1/128
    tied = results.copy()  # sign's final scores become grpo's: no estimator is better than another
    for seed in range(8):
        ends = tied["phase"].eq("end") & tied["seed"].eq(seed)
        grpo = tied.loc[ends & tied["estimator"].eq("grpo"), "pass_at_k"].iloc[0]
        tied.loc[ends & tied["estimator"].eq("sign"), "pass_at_k"] = pd.Series([grpo], dtype=object).values
    verdict = _verdict(tied)
    assert "vs grpo +0.0 points" in verdict  # the same scores seed by seed: paired differences all 0
    assert ": sign is equivalent within +-5.0 points to grpo (n = 8 seeds of sign)." in verdict
    assert "better than none" not in verdict


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
    figures = len(_img_sources(html_path.read_text()))
    assert len(re.findall(r"<img ", dom)) == figures and dom.count("data:image/png;base64,") == figures
    assert "figure img{max-width:100%" in dom and ".table-wrap{overflow-x:auto" in dom
    _assert_bottom_line_and_forest_before_methods(dom)


def _assert_bottom_line_and_forest_before_methods(page: str) -> None:
    """The first thing under the Verdict heading is the bottom line; the forest plot follows it; the methods
    paragraph, in its own section, comes after every result section."""
    verdict = page.index('<section id="verdict">')
    bottom_line = page.index("On pass@1, sign vs dr_grpo at G = 2: ")
    forest = page.index('id="fig-tested_differences"')
    methods = page.index('<section id="methods">')
    assert verdict < bottom_line < forest < page.index(">Summary</h2>") < page.index(">Training dynamics</h2>")
    assert page.index(">Training dynamics</h2>") < methods < page.index(">Configuration</h2>")
    first_paragraph = page[verdict:].split("<p>", 1)[1]
    assert first_paragraph.startswith("On pass@1, sign vs dr_grpo at G = 2: ")
    assert "Held-out score = pass@1 on the test split" in page[methods:]
    assert "Held-out score = pass@1 on the test split" not in page[:methods]
    assert "see Methods (#methods)" in page[verdict:forest]


def test_the_bottom_line_and_the_forest_plot_come_before_the_methods(full_report: tuple[Path, Path, Path]) -> None:
    _, html_path, md_path = full_report
    _assert_bottom_line_and_forest_before_methods(html_path.read_text())
    markdown = md_path.read_text()
    verdict = markdown.index("## Verdict\n")
    assert markdown[verdict:].split("\n\n", 2)[1].startswith("On pass@1, sign vs dr_grpo at G = 2: ")
    assert markdown.index("(figures/tested_differences.png)") < markdown.index("## Summary\n")
    assert markdown.index("## Training dynamics\n") < markdown.index("## Methods\n") < markdown.index(
        "## Configuration\n")
