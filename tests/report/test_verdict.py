"""The verdict (grpolab.report.verdict): the primary comparison first, same-update pairs and repeats in the
table of pairs not tested, different lrs, diverged runs and variants said in words, and old results tables
without those columns still read."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats as scipy_stats

from grpolab.errors import UserError
from grpolab.render import Section
from grpolab.report import write_report
from grpolab.report.tables import run_table, summary_table
from grpolab.report.verdict import DETAIL, UNTESTED, _sign_group_sizes, verdict_sections
from report_sweeps import EXTRA_FINALS, FINALS, shifted, synthetic_sweep, with_diverged, with_lrs, with_variants


def _unrendered(fig: Figure) -> bytes:
    """No PNG: these tests read the verdict's words and tables (the figures: test_report.py, test_forest.py)."""
    plt.close(fig)
    return b""


def _sections(results, config) -> dict[str, Section]:
    """The verdict's sections by title."""
    return {section.title: section for section in verdict_sections(results, None, config, None, _unrendered)}


def _detail(results, config) -> list[str]:
    """The detailed verdict's bullets; the first says when the primary comparison was declared."""
    return _sections(results, config)[DETAIL].bullets


def _bullets(results, config) -> list[str]:
    """The detailed verdict's bullets after the first."""
    return _detail(results, config)[1:]


def _untested(results, config) -> list[dict[str, str]]:
    """The rows of the table of pairs not tested."""
    section = _sections(results, config).get(UNTESTED)
    return [] if section is None else section.tables[0][1].to_dict("records")


def test_the_primary_comparison_comes_first_paired_and_holm_corrected_over_its_family() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo", "rloo"), seeds=3, sizes=(2, 4))
    bullets = _bullets(results, config)
    paired = [scipy_stats.ttest_rel(FINALS[("sign", g)], FINALS[("dr_grpo", g)]).pvalue for g in (2, 4)]
    assert max(paired) < 2 / 2**3  # the t-test claims more than 3 seeds can carry: its p is raised to 2 / 2^3
    holm = [0.5, 0.5]  # 2 / 2^3 = 0.25 for each (every seed's difference has the same sign), Holm over two
    assert bullets[0].startswith("Primary comparison (sign vs dr_grpo), G = 2: on pass@1, no evidence either way at "
                                 "this n (sign - dr_grpo = +44.0 points, unadjusted 95% CI [")
    assert (f"paired t (floored) p = 0.25, Holm-adjusted {holm[0]:.2g} over the primary family of 2 tests, "
            "n = 3 vs 3") in bullets[0]
    assert "interquartile means 74.0% vs 30.0%" in bullets[0]  # 3 runs: floor(3 / 4) = 0 cut, the plain means
    agrees = "; greedy accuracy agrees (sign - dr_grpo = +44.0 points, Holm-adjusted paired t (floored) p = "
    assert agrees in bullets[0]
    assert bullets[1].startswith("Primary comparison (sign vs dr_grpo), G = 4: on pass@1, ")
    assert f"Holm-adjusted {holm[1]:.2g} over the primary family of 2 tests" in bullets[1]
    untested = {(row["Arm"], row["Pair"]): row["Not tested because"] for row in _untested(results, config)}
    assert untested[("G = 2", "dr_grpo vs grpo")].startswith("the same update under Adam")
    assert untested[("G = 4", "dr_grpo vs rloo")].startswith("the same update under Adam")
    assert ("G = 4", "dr_grpo vs grpo") not in untested  # at G = 4, grpo is not rloo's or dr_grpo's multiple
    assert "are the same update under Adam at G" not in "\n".join(bullets)  # the table says it, not the bullets


def test_when_the_primary_was_declared_is_said_and_a_change_after_results_flagged() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2,))
    first = _detail(results, config)[0]
    assert first.startswith("The primary comparison is sign vs dr_grpo; when it was declared is not recorded")
    record = {"primary_declared": "2026-11-26T13:00:00Z", "primary_declared_after_results": False,
              "primary_replaced": ""}
    unknown = _detail(results, {**config, "primary_declaration": record})[0]
    assert unknown.startswith("The primary comparison sign vs dr_grpo was declared at 2026-11-26T13:00:00Z, before "
                              "any run of this sweep trained; whether earlier results of the same configuration were "
                              "known then is not recorded")
    before = _detail(results, {**config, "primary_declaration": {**record, "primary_earlier_results": ""}})[0]
    assert before == ("The primary comparison sign vs dr_grpo was declared at 2026-11-26T13:00:00Z, before any run "
                      "of this sweep trained and before any result of the same configuration (none beside the "
                      "sweep's folder or in experiments/).")
    known = {**record, "primary_earlier_results": "experiments/smollm2"}
    seen = _detail(results, {**config, "primary_declaration": known})[0]
    assert "before any result" not in seen.split("not a test")[0]
    assert ("but earlier results of the same configuration existed (experiments/smollm2): it was chosen with "
            "earlier results known") in seen
    changed = {**record, "primary_declared_after_results": True, "primary_replaced": "sign,grpo"}
    after = _detail(results, {**config, "primary_declaration": changed})[0]
    assert after.startswith("CHANGED AFTER RESULTS: the primary comparison sign vs dr_grpo was declared at "
                            "2026-11-26T13:00:00Z, after runs of this sweep had trained, replacing sign vs grpo")


def test_a_verdict_that_holds_on_pass_at_1_and_not_on_greedy_accuracy_says_so() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=8, sizes=(2,))  # 8 seeds: p can reach 1/128
    ends = results["phase"].eq("end") & results["estimator"].eq("sign")
    flat = results.copy()  # sign's greedy accuracy becomes dr_grpo's, seed by seed; its pass@1 stays ahead
    flat.loc[ends, "greedy_accuracy"] = FINALS[("dr_grpo", 2)] + EXTRA_FINALS[("dr_grpo", 2)]
    primary = _bullets(flat, config)[0]
    assert "on pass@1, sign > dr_grpo by 44.1 points" in primary and "paired t (floored) p = 0.0078" in primary
    assert "; this holds on pass@1 but not on greedy accuracy: there, sign and dr_grpo are equivalent within " \
           "+-5.0 points (TOST p = 0.0078; sign - dr_grpo = +0.0 points, 95% CI [n/a, n/a]" in primary  # 2 / 2^8


def test_a_declared_primary_pair_and_one_that_is_the_same_update() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=8, sizes=(2, 4))
    declared = {**config, "compare": {"primary": "grpo,sign"}}
    assert _bullets(results, declared)[0].startswith(
        "Primary comparison (grpo vs sign), G = 2: on pass@1, sign > grpo by 43.0 points")  # 0.748 - 0.318
    same = _bullets(results, {**config, "compare": {"primary": "grpo,dr_grpo"}})
    assert same[0].startswith("Primary comparison (grpo vs dr_grpo), G = 2: not tested: "
                              "grpo and dr_grpo are the same update under Adam at G = 2")
    assert same[1].startswith("Primary comparison (grpo vs dr_grpo), G = 4: on pass@1, ")
    missing = _bullets(results, {**config, "compare": {"primary": "sign,rloo"}})
    assert missing[0].endswith("G = 2: not testable: rloo has no finished run here.")


def test_arms_at_different_lrs_are_said_to_be() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    bullets = _bullets(with_lrs(results, {"sign": 1e-3, "dr_grpo": 3e-4}), config)
    assert bullets[0].endswith("; sign at 0.001 against dr_grpo at 0.0003.")
    same_lr = _bullets(with_lrs(results, {"sign": 1e-3, "dr_grpo": 1e-3}), config)
    assert "against" not in same_lr[0]


@pytest.mark.parametrize("drop_end", [True, False])
def test_diverged_runs_are_left_out_and_said(drop_end: bool) -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    results = with_diverged(results, {("sign", 4, 1): 12, ("sign", 4, 2): 15}, drop_end=drop_end)
    bullets = _bullets(results, config)
    assert bullets[0].endswith("G = 4: not testable: a test needs at least 2 finished runs per arm (n = 1 vs 3).")
    assert ("sign G = 4: 2 of 3 runs diverged (at step 12, 15); they are left out of every mean and test, which "
            "describe only the 1 run(s) that did not diverge") in "\n".join(bullets)
    row = summary_table(results).set_index("estimator").loc["sign"]
    assert row["n_seeds"] == 1 and row["n_diverged"] == 2 and row["final_accuracy"] == pytest.approx(0.76)


def test_a_report_with_diverged_runs_and_one_where_every_run_diverged(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(("sign", "dr_grpo"), seeds=2, sizes=(2,))
    diverged = with_diverged(results, {("sign", 2, 0): 7})
    _, md_path = write_report(tmp_path / "some", diverged, metrics, config)
    markdown = md_path.read_text()
    assert "| Estimator | G | Seeds | Diverged (left out) |" in markdown
    assert "| sign | 2 | 1 | 1 | 25.0% | 74.0% | n/a (n = 1) |" in markdown  # seed 1 only
    assert "sign G = 2: 1 of 2 runs diverged (at step 7)" in markdown
    everything = {(e, 2, s): 3 for e in ("sign", "dr_grpo") for s in range(2)}
    with pytest.raises(UserError, match="every run diverged"):
        write_report(tmp_path / "all", with_diverged(results, everything), metrics, config)


def test_variants_group_the_verdict_and_the_report(tmp_path: Path) -> None:
    results, metrics, config = synthetic_sweep(("sign", "dr_grpo"), seeds=8, sizes=(2,))
    varied = with_variants({"max_grad_norm=1": results, "max_grad_norm=0": shifted(results, "dr_grpo", 0.44)})
    bullets = _bullets(varied, config)
    assert bullets[0].startswith("Primary comparison (sign vs dr_grpo), G = 2 (max_grad_norm=0): on pass@1, "
                                 "sign and dr_grpo are equivalent within +-5.0 points")
    assert bullets[1].startswith("Primary comparison (sign vs dr_grpo), G = 2 (max_grad_norm=1): on pass@1, "
                                 "sign > dr_grpo by 44.1 points")
    metrics = with_variants({"max_grad_norm=1": metrics, "max_grad_norm=0": metrics})
    _, md_path = write_report(tmp_path, varied, metrics, config)
    markdown = md_path.read_text()
    assert "| max_grad_norm=0 | dr_grpo | 2 | 8 | 69.0% | 74.5% |" in markdown  # every evaluation + 0.44
    assert "| max_grad_norm=1 | 2 | sign vs dr_grpo | primary (Holm, its family) |" in markdown


def test_a_same_update_pair_at_different_lrs_differs_by_its_lr_alone() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=2, sizes=(2,))
    rows = _untested(with_lrs(results, {"sign": 1e-3, "dr_grpo": 1e-3, "grpo": 3e-4}), config)
    assert {"Arm": "G = 2", "Pair": "dr_grpo vs grpo", "A - B": "-2.0 points",
            "Not tested because": "the same update under Adam (advantages 0.707 times each other on every reward "
                                  "pattern); different lrs (dr_grpo at 0.001 against grpo at 0.0003), so any "
                                  "difference is the lr's"} in rows
    same_lr = _untested(with_lrs(results, {"sign": 1e-3, "dr_grpo": 1e-3, "grpo": 1e-3}), config)
    same = next(row for row in same_lr if row["Pair"] == "dr_grpo vs grpo")
    assert same["Not tested because"].endswith("on every reward pattern)")  # nothing about lrs


def test_repeats_of_the_primary_pair_are_named_not_tested() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo", "rloo"), seeds=3, sizes=(2,))
    verdict = "\n".join(_bullets(results, config))
    repeats = [(row["Pair"], row["Not tested because"]) for row in _untested(results, config)
               if row["Not tested because"].startswith("repeats")]
    because = "repeats sign vs dr_grpo (its stand-in is the same update under Adam, at the same lr)"
    assert repeats == [("sign vs grpo", because), ("sign vs rloo", because)]
    assert "secondary: sign against" not in verdict  # nothing left to test at G = 2 besides the primary pair


def test_a_pair_read_the_other_way_round_flips_its_differences_and_intervals() -> None:
    from grpolab.report.comparisons import comparisons
    from grpolab.report.tables import run_table
    from grpolab.report.verdict import _pair

    results, _, config = synthetic_sweep(("sign", "dr_grpo", "grpo"), seeds=3, sizes=(4,))
    rows, _ = comparisons(run_table(results), config)
    forward, backward = _pair(rows, "", 4, "sign", "grpo"), _pair(rows, "", 4, "grpo", "sign")
    assert backward["mean_difference"] == pytest.approx(-forward["mean_difference"])
    assert (backward["difference_low"], backward["difference_high"]) == pytest.approx(
        (-forward["difference_high"], -forward["difference_low"]))
    assert backward["greedy_difference_low"] == pytest.approx(-forward["greedy_difference_high"])
    assert backward["prob_improvement"] == pytest.approx(1 - forward["prob_improvement"])
    assert (backward["iqm_a"], backward["p_holm"]) == (forward["iqm_b"], forward["p_holm"])


def test_no_evidence_either_way_says_how_many_seeds_would_resolve_it() -> None:
    """max_grad_norm=0: sign [0.70, 0.74, 0.78] against dr_grpo + 0.40 [0.68, 0.70, 0.72]: per-seed differences
    0.02, 0.04, 0.06 (SD 0.02), in a primary family of 2 (one pair per variant)."""
    from grpolab.planning import paired_power, seeds_needed

    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(2,))
    varied = with_variants({"max_grad_norm=1": results, "max_grad_norm=0": shifted(results, "dr_grpo", 0.40)})
    needed = seeds_needed(0.04, 0.02, family=2)
    assert paired_power(0.04, 0.02, needed, family=2) >= 0.8
    assert needed == 7  # the t-test's power passes 0.8 below 7 seeds, but 2 / 2^6 >= 0.05 / 2: the sign-flip floor
    assert (f"{needed} seeds per arm would detect a difference of +4.0 points at 80% power (paired t, Holm over "
            "the primary family of 2; grpolab plan)") in _bullets(varied, config)[0]


def test_runs_stopped_with_no_signal_are_counted_and_the_arm_flagged() -> None:
    results, _, config = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    stopped = results.copy()
    dead = stopped["estimator"].eq("dr_grpo") & stopped["seed"].isin([0, 2])
    stopped.loc[dead, "status"] = "no_signal"
    stopped.loc[dead, "no_signal_at_step"] = 3.0
    bullets = _bullets(stopped, config)
    assert ("dr_grpo G = 4: 2 of 3 runs stopped with no learning signal at step 3 (--stop-when-dead)"
            in "\n".join(bullets))
    assert "no learning signal" not in "\n".join(_bullets(results, config))
    assert summary_table(stopped).set_index("estimator").loc["dr_grpo", "n_seeds"] == 3  # counted, not left out


def test_signs_gain_between_group_sizes_is_paired_by_seed() -> None:
    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=4, sizes=(2, 4))
    runs = run_table(results)
    line, = _sign_group_sizes(runs)
    sign = runs[runs["estimator"] == "sign"]
    gains = {g: (r.set_index("seed")["final_accuracy"] - r.set_index("seed")["start_accuracy"]).sort_index()
             for g, r in sign.groupby("group_size")}
    expected = max(scipy_stats.ttest_rel(gains[4].to_numpy(), gains[2].to_numpy()).pvalue, 2 / 2**4)
    assert "G = 4 vs G = 2: paired t" in line and "Welch" not in line
    assert f"p = {expected:.2g}." in line


def test_a_diverged_run_is_left_out_of_the_family_and_equal_cost_tables() -> None:
    """Was: the per-family table (and the verdict's "where the gain sits" line) averaged the diverged run's last
    evaluation with the others; the tables now equal those of the sweep without it."""
    from grpolab.report.tables import equal_cost_table, family_table

    results, _, _ = synthetic_sweep(("sign", "dr_grpo"), seeds=3, sizes=(4,))
    prompts = len(results["successes"].iloc[0])
    results["families"] = [["a" if i % 2 else "b" for i in range(prompts)]] * len(results)
    kept = with_diverged(results, {("sign", 4, 2): 999}, drop_end=False)  # keeps its end evaluation
    alone = kept[kept["status"] != "diverged"]
    pd.testing.assert_frame_equal(family_table(kept), family_table(alone))
    pd.testing.assert_frame_equal(equal_cost_table(kept), equal_cost_table(alone))
    assert not family_table(kept).equals(family_table(results))  # the diverged run's scores differ from the others'
