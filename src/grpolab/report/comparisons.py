"""Which pairs of arms the report tests, and how: one primary comparison (``report.verdict.declaration_line`` says
when it was declared, and whether earlier results of the same configuration were known), the other pairs
secondary, and the pairs that are one update under Adam named instead of tested.

Within each (variant, group size), the arms are the estimators' finished runs (``tables.run_table``). The
primary pair is ``--primary`` (the sweep's ``primary`` setting, "A,B"; without it "sign,dr_grpo" when both
ran, else the first two estimators of the sweep). Two test families, each Holm-corrected as one (Holm 1979):
the primary family is the primary pair at every group size and variant; the secondary family is every other
testable pair, of every group size and variant. A pair whose advantages are one positive multiple of each
other on every reward pattern (``report.same_update``) is the same update under Adam: it is listed, never
tested, and spends no alpha. When such a pair also ran at the same lr, one of the two stands in for both (the
primary pair's member, else the first in display order), and a pair with the other one is a "repeat" of the
stand-in's pair: listed, not tested (sign vs grpo at G = 2 repeats sign vs dr_grpo).

The estimators of a sweep run the same seeds, and seed s of each starts from the same policy and is
evaluated on the same prompts, so where both arms hold the same seeds the test is paired by seed (the paired
t-test and the t interval of the per-seed differences); where they do not (a seed diverged in one arm) it
falls back to Welch's, and the row says which (``test``): ``grpolab.pairing.compare_arms``, the rule every
script shares. Each tested pair carries
``grpolab.stats.compare_pair`` on the report's score (pass@1, ``tables.score``) and, where the score is pass@1,
the same test on greedy accuracy (``greedy_*``), so that a verdict that holds on one metric and not the other
says so. Absence of a difference is tested, not read off a p-value: TOST (Schuirmann 1987) at each metric's
margin, ``equivalence_margin`` (the sweep setting, default 0.05 = 5 points) cut to a quarter of the headroom above
that metric's start score (``grpolab.equivalence``), Holm-corrected in the same family; a pair whose arms both end
within the margin of 100% is "ceiling" (cannot be resolved), never equivalent; a pair that is neither different nor
equivalent is "no evidence either way at this n". Also shown: the Welch, permutation and
Mann-Whitney p-values, Hedges' g, the interquartile means and P(A > B) with Newcombe's interval (rliable's
summaries, Agarwal et al. 2021, arXiv 2108.13264). Departure from rliable: no stratified bootstrap (see
``grpolab.stats``).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from grpolab import equivalence, stats
from grpolab.advantages import display_order
from grpolab.pairing import compare_arms
from grpolab.planning.power import MOST_SEEDS, seeds_needed
from grpolab.report.same_update import same_update_ratio
from grpolab.report.tables import ALPHA, N_RESAMPLES

__all__ = ["arm_label", "comparisons", "equivalence_margin", "finding", "finding_phrase", "greedy_clause", "lr_phrase",
           "metric_name", "p_phrase", "permutation_floor_notes", "points", "primary_pair", "reading", "repeat_phrase",
           "resolve_phrase", "same_update_phrase", "seeds_to_resolve"]

DEFAULT_PRIMARY = ("sign", "dr_grpo")
GREEDY = "greedy_"  # prefix of a row's fields computed on greedy accuracy
GREEDY_FIELDS = ("test", "mean_a", "mean_b", "mean_difference", "difference_low", "difference_high", "difference_sd",
                 "p", "tost_p", "margin")
PLANNED_POWER = 0.8  # the power at which an unclear finding says how many seeds would resolve it


def arm_label(variant: str, size: int) -> str:
    """'G = 4', or 'G = 4 (max_grad_norm=0)' for a variant."""
    return f"G = {size}" + (f" ({variant})" if variant else "")


def _names(value: Any) -> list[str]:
    """A comma-separated string or a list of names -> the names."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return [str(name) for name in value or []]


def primary_pair(config: dict[str, Any], present: list[str]) -> tuple[str, str] | None:
    """The declared primary pair (``config["compare"]["primary"]``, "A,B"), else the default: sign and dr_grpo
    when the sweep ran both, else its first two estimators. ``present``: the estimators that have runs (the
    sweep's list when the config does not hold one). None when fewer than two estimators ran."""
    compare = config.get("compare") or {}
    declared = _names(compare.get("primary"))
    if len(declared) == 2:
        return declared[0], declared[1]
    estimators = _names(compare.get("estimators") or config.get("estimators")) or list(present)
    if all(name in estimators for name in DEFAULT_PRIMARY):
        return DEFAULT_PRIMARY
    return (estimators[0], estimators[1]) if len(estimators) >= 2 else None


def _equivalence_checkable(config: dict[str, Any], variant: str = "") -> bool:
    """Adam's scale invariance makes proportional advantages one update only without a KL term and at the
    estimators' default hyper-parameters (the check uses those), in the sweep's settings and in a ``--vary``
    variant ("FIELD=VALUE[,FIELD=VALUE]") that changes them."""
    train = config.get("train") or {}
    beta = re.search(r"(?:^|,)beta=([^,]+)", variant)
    try:
        kl = float(beta.group(1)) if beta else float(train.get("beta") or 0.0)
    except ValueError:
        return False
    return not kl > 0 and not train.get("advantage_kwargs") and "advantage_kwargs=" not in variant


def _lr(group: pd.DataFrame) -> float:
    """The arm's lr when all its runs share one, else NaN."""
    lrs = group["lr"].dropna().unique() if "lr" in group.columns else []
    return float(lrs[0]) if len(lrs) == 1 else math.nan


def _oriented(a: str, b: str, primary: tuple[str, str] | None) -> tuple[str, str, str]:
    """(name_a, name_b, role) with the primary pair in its declared order."""
    if primary is not None and {a, b} == set(primary):
        return primary[0], primary[1], "primary"
    return a, b, "secondary"


def _pair_row(arms: dict[str, pd.DataFrame], a: str, b: str, role: str, key: dict[str, Any],
              checkable: bool) -> dict[str, Any]:
    """The row of one pair before any test: its arms' sizes, means and lrs, and its role ("same_update" when
    the two are one update under Adam, else the role given)."""
    finals = {name: arms[name]["final_accuracy"].to_numpy(float) for name in (a, b)}
    row = {**key, "name_a": a, "name_b": b, "role": role, "n_a": finals[a].size, "n_b": finals[b].size,
           "mean_a": float(finals[a].mean()), "mean_b": float(finals[b].mean()),
           "mean_difference": float(finals[a].mean() - finals[b].mean()),
           "lr_a": _lr(arms[a]), "lr_b": _lr(arms[b]), "tested": False, "ratio": math.nan, "repeats": ""}
    ratio = same_update_ratio(a, b, int(key["group_size"])) if checkable else None
    return {**row, "role": "same_update", "ratio": ratio} if ratio is not None else row


def _representatives(names: list[str], rows: list[dict[str, Any]], primary: tuple[str, str] | None) -> dict[str, str]:
    """Each estimator's stand-in among those that are the same update as it at the same lr: the primary pair's
    member if one is among them, else the first in display order."""
    stand_in = {name: name for name in names}
    for row in rows:
        if row["role"] == "same_update" and not lr_phrase(row):
            kept, merged = sorted((stand_in[row["name_a"]], stand_in[row["name_b"]]), key=names.index)
            stand_in = {name: kept if rep == merged else rep for name, rep in stand_in.items()}
    for name in primary or ():
        if name in stand_in:
            old = stand_in[name]
            stand_in = {other: name if rep == old else rep for other, rep in stand_in.items()}
    return stand_in


def _with_repeats(rows: list[dict[str, Any]], stand_in: dict[str, str]) -> list[dict[str, Any]]:
    """Pairs that involve an estimator standing in for another are repeats of the stand-ins' pair: not tested."""
    out = []
    for row in rows:
        a, b = stand_in[row["name_a"]], stand_in[row["name_b"]]
        if row["role"] != "same_update" and (a, b) != (row["name_a"], row["name_b"]):
            row = {**row, "role": "repeat", "repeats": f"{a} vs {b}"}
        out.append(row)
    return out


def equivalence_margin(config: dict[str, Any]) -> float:
    """The TOST margin: the sweep's ``equivalence_margin`` setting, else ``stats.DEFAULT_EQUIVALENCE_MARGIN``."""
    value = (config.get("compare") or {}).get("equivalence_margin")
    return float(value) if value else stats.DEFAULT_EQUIVALENCE_MARGIN


def metric_name(row: dict[str, Any]) -> str:
    """What a row's score is: "pass@1" when both arms drew evaluation samples, else "greedy accuracy"."""
    return "pass@1" if row.get("sampled", True) else "greedy accuracy"


def _by_seed(group: pd.DataFrame, column: str) -> pd.Series:
    return group.set_index("seed")[column].astype(float).sort_index()


def _tested(row: dict[str, Any], arms: dict[str, pd.DataFrame], margin: float) -> dict[str, Any]:
    """A primary or secondary row with ``stats.compare_pair``'s fields when both arms have >= 2 runs: paired by
    seed when both arms hold the same seeds, else Welch; on greedy accuracy too (``greedy_*``) where the
    score is pass@1."""
    if row["role"] not in ("primary", "secondary") or min(row["n_a"], row["n_b"]) < 2:
        return row
    a, b = arms[row["name_a"]], arms[row["name_b"]]
    sampled = bool((a["n"] > 0).all() and (b["n"] > 0).all())
    tested = {**row, "tested": True, "sampled": sampled}
    for prefix, column, start in (("", "final_accuracy", "start_accuracy"), (GREEDY, "final_greedy", "start_greedy")):
        x, y = _by_seed(a, column), _by_seed(b, column)
        if prefix and (not sampled or not (np.isfinite(x).all() and np.isfinite(y).all())):
            continue
        result = compare_arms(x, y, margin=_metric_margin(margin, a, b, start), n_resamples=N_RESAMPLES,
                              random_state=0)
        tested.update(result if not prefix else {prefix + k: result[k] for k in GREEDY_FIELDS})
    return tested


def _metric_margin(fixed: float, a: pd.DataFrame, b: pd.DataFrame, start: str) -> float:
    """The TOST margin of one metric (``equivalence.margin``): the fixed margin cut to a share of the headroom above
    the two arms' mean start score on that metric; the fixed margin where the start was not recorded."""
    starts = pd.concat([a[start], b[start]]).astype(float) if start in a and start in b else pd.Series(dtype=float)
    starts = starts[np.isfinite(starts)]
    return equivalence.margin(fixed, float(starts.mean())) if len(starts) else fixed


def _holm(rows: list[dict[str, Any]], family: str) -> list[dict[str, Any]]:
    """``stats.holm_family`` over the rows of one family, on the score and on greedy accuracy where every row
    has it; each row gets its ``family`` name and size."""
    rows = [{**r, "family": family, "family_size": 0} for r in stats.holm_family(rows)]
    for row in rows:
        row["family_size"] = len(rows)
    if rows and all(GREEDY + "p" in r for r in rows):
        for field in ("p", "tost_p"):
            adjusted = stats.holm_correction([r[GREEDY + field] for r in rows])
            for row, value in zip(rows, adjusted, strict=True):
                row[f"{GREEDY}{field}_holm"] = float(value)
    return rows


def _families(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The primary rows of every group size and variant Holm-adjusted as one family, every other tested row as
    the second; untested rows unchanged. The order of ``rows`` is kept."""
    adjusted: dict[int, dict[str, Any]] = {}
    for family in ("primary", "secondary"):
        members = [i for i, r in enumerate(rows) if r["tested"] and r["role"] == family]
        adjusted.update(zip(members, _holm([rows[i] for i in members], family), strict=True))
    return [adjusted.get(i, row) for i, row in enumerate(rows)]


def _in_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One (variant, G)'s rows: primary first, then secondary, then the rest."""
    rank = {"primary": 0, "secondary": 1}
    return sorted(rows, key=lambda r: rank.get(r["role"], 2) if r["tested"] else 2)


def _too_few(arms: dict[str, pd.DataFrame], label: str) -> list[str]:
    skipped = [f"{name} (n = {len(group)})" for name, group in arms.items() if len(group) < 2]
    return [f"{label}: no test for {', '.join(skipped)}: a test needs at least 2 seeds."] if skipped else []


def comparisons(runs: pd.DataFrame, config: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The pairs of every (variant, group size) -> (rows, notes).

    runs: ``tables.run_table``. Each row: variant, group_size, name_a, name_b, role ("primary", "secondary",
    "same_update", or "repeat" with ``repeats`` naming the pair it repeats), tested, n_a, n_b, mean_a, mean_b,
    mean_difference, lr_a, lr_b (NaN unless one lr per arm), ratio (the same-update ratio, else NaN) and, when
    tested, ``sampled`` (the score is pass@1), ``stats.compare_pair``'s fields with ``*_holm`` adjusted within
    the row's ``family`` ("primary" or "secondary", of ``family_size`` tests), and the ``greedy_*`` fields.
    """
    config = config or {}
    primary = primary_pair(config, display_order(runs["estimator"]))
    margin = equivalence_margin(config)
    rows, notes = [], []
    for (variant, size), group in runs.groupby(["variant", "group_size"]):
        arms = {name: group[group["estimator"] == name] for name in display_order(group["estimator"])}
        key = {"variant": variant, "group_size": int(size)}
        checkable = _equivalence_checkable(config, variant)
        found = [_pair_row(arms, *_oriented(a, b, primary), key, checkable) for a, b in itertools.combinations(arms, 2)]
        stand_in = _representatives(list(arms), found, primary)
        found = [_tested(row, arms, margin) for row in _with_repeats(found, stand_in)]
        notes += _too_few(arms, arm_label(variant, int(size)))
        if not any(r["tested"] for r in found):
            notes.append(f"{arm_label(variant, int(size))}: no pair of estimators with >= 2 seeds each, so no "
                         "p-values are claimed.")
        rows += _in_order(found)
    return _families(rows), notes


def _min_permutation_p(n_a: int, n_b: int) -> float:
    """Smallest p the exact two-sided permutation test can give (2 / C(N, n_a) for equal sizes)."""
    splits = math.comb(n_a + n_b, n_a)
    return (2 if n_a == n_b else 1) / splits if splits <= N_RESAMPLES else 0.0


def permutation_floor_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One note per seed count (n_a, n_b) whose exact permutation test cannot reach p < ALPHA."""
    notes = []
    for n_a, n_b in sorted({(r["n_a"], r["n_b"]) for r in rows if r["tested"]}):
        floor = _min_permutation_p(n_a, n_b)
        if floor > ALPHA:
            notes.append(
                f"With n = {n_a} vs {n_b} seeds the exact permutation test cannot go below p = {floor:.2g}: "
                f"its p-values cannot confirm any difference; run more seeds for that."
            )
    return notes


def points(value: float) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    return f"{100 * value:+.1f} points" if value == 0 or abs(100 * value) >= 0.05 else f"{100 * value:+.2g} points"


def p_phrase(row: dict[str, Any], prefix: str = "") -> str:
    """'paired t p = 0.004, Holm-adjusted 0.008 over the primary family of 2 tests' ('Welch p' where the seeds
    do not pair); ``prefix`` GREEDY: the same on greedy accuracy."""
    test, raw, adjusted = row[prefix + "test"], row[prefix + "p"], row[prefix + "p_holm"]
    if row["family_size"] == 1:
        return f"{test} p = {raw:.2g}, the only test of the {row['family']} family"
    return f"{test} p = {raw:.2g}, Holm-adjusted {adjusted:.2g} over the {row['family']} family of " \
           f"{row['family_size']} tests"


def finding(row: dict[str, Any], prefix: str = "") -> str:
    """What a tested row's family-adjusted tests say: "higher" (a > b), "lower", "ceiling" (not different, and both
    arms end within the margin of 100%, where any two arms are within the margin of each other:
    ``equivalence.at_ceiling``), "equivalent" (TOST within the margin) or "unclear" (no evidence either way at this
    n); ``prefix`` GREEDY: on greedy accuracy."""
    if row[prefix + "p_holm"] < ALPHA:
        return "higher" if row[prefix + "mean_difference"] > 0 else "lower"
    means = (row.get(prefix + "mean_a", row["mean_a"]), row.get(prefix + "mean_b", row["mean_b"]))
    if equivalence.at_ceiling(*means, row.get(prefix + "margin", row["margin"])):
        return "ceiling"
    return "equivalent" if row[prefix + "tost_p_holm"] < ALPHA else "unclear"


def _ci(row: dict[str, Any]) -> str:
    """'95% CI', or 'unadjusted 95% CI' where the pair's family holds more tests (the interval is the pair's own
    t interval, while its p is Holm-adjusted: it can exclude 0 where the adjusted p does not resolve)."""
    return "unadjusted 95% CI" if row["family_size"] > 1 else "95% CI"


def _interval(row: dict[str, Any], prefix: str = "") -> str:
    return f"{_ci(row)} [{points(row[prefix + 'difference_low'])}, {points(row[prefix + 'difference_high'])}]"


def finding_phrase(row: dict[str, Any], prefix: str = "") -> str:
    """The finding in words, with its numbers: 'sign > dr_grpo by 9.2 points, 95% CI [...] (paired t p = ...)',
    'sign and dr_grpo are equivalent within +-5.0 points (...)' or 'no evidence either way at this n (...)'."""
    a, b, diff = row["name_a"], row["name_b"], row[prefix + "mean_difference"]
    said, numbers = finding(row, prefix), f"{p_phrase(row, prefix)}, n = {row['n_a']} vs {row['n_b']}"
    tost = (f"TOST p = {row[prefix + 'tost_p']:.2g}, Holm-adjusted {row[prefix + 'tost_p_holm']:.2g}"
            if row["family_size"] > 1 else f"TOST p = {row[prefix + 'tost_p']:.2g}")
    if said in ("higher", "lower"):
        high, low = (a, b) if said == "higher" else (b, a)
        ends = (row[prefix + "difference_low"], row[prefix + "difference_high"])
        ends = ends if said == "higher" else (-ends[1], -ends[0])  # the interval of high - low
        return (f"{high} > {low} by {100 * abs(diff):.1f} points, {_ci(row)} [{points(ends[0])}, {points(ends[1])}] "
                f"({numbers})")
    margin = 100 * row.get(prefix + "margin", row["margin"])
    if said == "ceiling":
        means = (row.get(prefix + "mean_a", row["mean_a"]), row.get(prefix + "mean_b", row["mean_b"]))
        return (f"{a} and {b} both end at the ceiling ({100 * means[0]:.1f}% and {100 * means[1]:.1f}%, within "
                f"+-{margin:.1f} points of 100%): cannot be resolved, and not called equivalent ({a} - {b} = "
                f"{points(diff)}, {_interval(row, prefix)}, {numbers})")
    if said == "equivalent":
        return (f"{a} and {b} are equivalent within +-{margin:.1f} points ({tost}; {a} - {b} = {points(diff)}, "
                f"{_interval(row, prefix)}, {numbers})")
    return (f"no evidence either way at this n ({a} - {b} = {points(diff)}, {_interval(row, prefix)}, {numbers}; "
            f"not shown equivalent within +-{margin:.1f} points, {tost}); {resolve_phrase(row, prefix)}")


def resolve_phrase(row: dict[str, Any], prefix: str = "") -> str:
    """How many seeds per arm would resolve a difference of the observed size: 'N seeds per arm would detect a
    difference of +3.2 points at 80% power (paired t, Holm over the primary family of 2)'
    (``planning.power.seeds_needed`` with the row's per-seed difference SD)."""
    diff, spread = row[prefix + "mean_difference"], row.get(prefix + "difference_sd", math.nan)
    family = f"Holm over the {row['family']} family of {row['family_size']}" if row["family_size"] > 1 else \
        "the only test of its family"
    if not math.isfinite(spread):
        return "the seeds that would resolve it are not known (no per-seed spread)"
    needed = seeds_to_resolve(row, prefix)
    if needed is None:
        return ("no number of seeds resolves an observed difference of 0" if diff == 0 else
                f"more than {MOST_SEEDS:,} seeds per arm would be needed to detect a difference of {points(diff)}")
    unpaired = row.get(prefix + "test") in stats.WELCH_TESTS
    test = ("paired t of a paired design, planned from these unpaired runs' SD (more seeds than their pairing "
            "would ask)" if unpaired else "paired t")
    return (f"{needed} seeds per arm would detect a difference of {points(diff)} at {PLANNED_POWER:.0%} power "
            f"({test}, {family}; grpolab plan)")


def seeds_to_resolve(row: dict[str, Any], prefix: str = "") -> int | None:
    """Seeds per arm at which the paired t-test detects the row's observed difference at ``PLANNED_POWER`` in its
    Holm family (``planning.power.seeds_needed`` with the per-seed difference SD); None when unknown (no
    per-seed spread) or when no number of seeds does (an observed difference of 0)."""
    diff, spread = row[prefix + "mean_difference"], row.get(prefix + "difference_sd", math.nan)
    if not math.isfinite(spread):
        return None
    return seeds_needed(diff, spread, power=PLANNED_POWER, alpha=ALPHA, family=row["family_size"])


def greedy_clause(row: dict[str, Any]) -> str:
    """How greedy accuracy reads the same pair: '' where it was not tested, else agreeing or not."""
    if GREEDY + "p_holm" not in row:
        return ""
    if finding(row, GREEDY) == finding(row):
        return (f"; greedy accuracy agrees ({row['name_a']} - {row['name_b']} = "
                f"{points(row[GREEDY + 'mean_difference'])}, Holm-adjusted {row[GREEDY + 'test']} p = "
                f"{row[GREEDY + 'p_holm']:.2g})")
    return f"; this holds on pass@1 but not on greedy accuracy: there, {finding_phrase(row, GREEDY)}"


def lr_phrase(row: dict[str, Any]) -> str:
    """'; sign at 0.001 against grpo at 0.0003' when the two arms ran at different lrs, else ''."""
    lr_a, lr_b = row.get("lr_a", math.nan), row.get("lr_b", math.nan)
    if not (np.isfinite(lr_a) and np.isfinite(lr_b)) or math.isclose(lr_a, lr_b, rel_tol=1e-9):
        return ""
    return f"; {row['name_a']} at {lr_a:g} against {row['name_b']} at {lr_b:g}"


def same_update_phrase(row: dict[str, Any]) -> str:
    """Why a pair is not tested: the same update under Adam (and, at different lrs, that only the lr differs)."""
    text = (f"{row['name_a']} and {row['name_b']} are the same update under Adam at G = {row['group_size']} "
            f"before gradient clipping (advantages {row['ratio']:.3g} times each other on every reward pattern; "
            f"equal up to Adam's epsilon), so they are not tested against each other; clipping acts on each arm's "
            f"steps at its own rate (see Gradient clipping), so an untested pair is not shown equal")
    if lr_phrase(row):
        text += f"; they ran at different lrs ({lr_phrase(row)[2:]}), so any difference between them is the lr's"
    return text


def repeat_phrase(row: dict[str, Any]) -> str:
    return (f"not tested: it repeats {row['repeats']} (each stand-in is the same update under Adam as the "
            "estimator it stands for, at the same lr)")


def reading(row: dict[str, Any]) -> str:
    """One honest line per pair, naming its metric, e.g. "G = 4 (primary): on pass@1, sign > dr_grpo by 21.0
    points, 95% CI [...] (paired t p = 0.004, Holm-adjusted ..., n = 5 vs 5); greedy accuracy agrees (...)"."""
    label = arm_label(row["variant"], row["group_size"])
    if row["role"] == "same_update":
        return f"{label}: {same_update_phrase(row)}."
    if row["role"] == "repeat":
        return f"{label}: {row['name_a']} vs {row['name_b']}: {repeat_phrase(row)}."
    if not row["tested"]:
        return (f"{label}: {row['name_a']} vs {row['name_b']}: {points(row['mean_difference'])}, not tested "
                f"(n = {row['n_a']} vs {row['n_b']}).")
    tag = " (primary)" if row["role"] == "primary" else ""
    return f"{label}{tag}: on {metric_name(row)}, {finding_phrase(row)}{lr_phrase(row)}{greedy_clause(row)}."
