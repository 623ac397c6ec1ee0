"""How much of the held-out end score the early degenerate share explains, on the committed experiments.

    python scripts/early_warning_calibration.py   # experiments/early-warning/: table.md, table.csv, cells.csv, fit.png,
                                                  # measured.md, measured.csv, measured_cells.csv
    python scripts/early_warning_calibration.py extract --remedies-new runs/remedies-new \
        --sign-map runs/sign-map --batch-size runs/batch-size --noise-direction runs/noise-direction
        # early-warning/measured_runs.csv (remedies-new) and measured_runs_EXPERIMENT.csv (the others)

The question is that of an early-warning calibration: arXiv 2605.21125 reports that the early "advantage collapse
rate" explains 62% of the variance of final MATH-500 accuracy over 245 configurations. Here the configurations
are the cells (estimator x condition, mean over seeds) and the runs of ``experiments/sign-map``,
``experiments/remedies``, ``experiments/remedies-curriculum`` and ``experiments/batch-size``, all on the embedded
model's ``reverse`` task, 20 steps, end score = held-out end pass@1 (8 samples on the 200 test prompts).

What the committed files hold, and the departure it forces: no committed file holds a run's per-step
``starvation/uniform`` or ``starvation/degenerate`` (they live in each run's ``metrics.jsonl`` under the
git-ignored ``runs/`` folders). What is committed is the start policy's per-prompt spread E[p(1 - p)] of each
difficulty level (unbiased from the start evaluation's counts, mean over seeds 0-9: ``experiments/sign-map/
variance.md``) and the start pass@1. From them this script computes the *expected step-1* shares of the start
policy, the same for every seed and estimator of a (level, G) condition:

* all-equal-reward share (``starvation/uniform``): E[p^G + (1 - p)^G]. At G = 2 exactly 1 - 2 E[p(1 - p)], the
  value ``grpolab preflight`` predicts from counts (``grpolab.preflight.predict``). At G = 4 it is
  1 - 4 E[q] + 2 E[q^2] with q = p(1 - p) in [0, 1/4], and E[q^2] is not committed: only its bounds
  E[q]^2 <= E[q^2] <= E[q]/4, so every analysis with G = 4 cells is run at both ends.
* zero-advantage share (``starvation/degenerate``, G = 2 only): each reward pair's probability, summed over the
  pairs to which the arm's estimator (``grpolab.advantages``, the remedy suffix dropped: counted as sampled,
  before the remedy acts) gives all-zero advantages. That is the all-equal share for a group-centred estimator, 0
  for ``sign`` (never zero), E[(1 - p)^2] = 1 - pbar - E[q] (all-wrong pairs) for ``reinforce`` and
  E[p^2] = pbar - E[q] (all-right pairs) for ``nsr``.

Steps 2-3 (the steps ``--stop-when-dead`` also watches) are not recoverable from the committed files. R² is that of
the least-squares line of the end score on the share; its 95% interval is a percentile bootstrap over cells
(a run-level analysis resamples cells with all their runs). The "ceiling" is the R² of the cell scores on their
(level, G) condition's mean: the most any function of a step-1 share of the start policy can explain.

Measured shares (measured.md): the demo's ``steps.csv`` commits them; ``extract`` reduces the git-ignored
sweeps of remedies-new, sign-map, batch-size and noise-direction (each run's ``metrics.parquet``) to one row per
result run: its mean over steps 1-3 of the measured ``starvation/uniform`` and ``starvation/degenerate`` (the demo
has no degenerate share) and its own end pass@1. Sign-map and batch-size are reruns of committed experiments: their
end pass@1 is the rerun's, never the committed one, and ``reproduction`` compares the two run by run. On those
cells (experiment x level x condition x estimator x G) the script fits the same R², set beside the expected step-1
share of the same cells, and gives the Pearson r between the measured and the expected share.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from grpolab.advantages import compute_advantages
from grpolab.advantages.registry import split_remedies

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
RESAMPLES, SEED = 2000, 0
BOUNDS = ("low", "high")  # the G = 4 all-equal share at E[q^2]'s lower / upper bound


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=Path, default=EXPERIMENTS, help="the committed experiments folder")
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "early-warning")
    parser.add_argument("--no-figure", action="store_true", help="write the tables only")
    commands = parser.add_subparsers(dest="command")
    extract = commands.add_parser("extract", help="write early-warning/measured_runs*.csv from the sweeps' metrics")
    for experiment, (pattern, _, name) in SWEEP_LAYOUTS.items():
        extract.add_argument(
            f"--{experiment}", type=Path, help=f"the {experiment} runs folder (its {pattern} sweeps): writes {name}"
        )
    return parser.parse_args()


# ---------------------------------------------------------------- the committed runs


def level_moments(variance_md: Path) -> pd.DataFrame:
    """Per level: start_p (mean start pass@1) and spread (E[p(1 - p)]) from the table of ``variance.md``."""
    lines = [line for line in variance_md.read_text().splitlines() if line.startswith("| ")]
    if not lines:
        raise SystemExit(f"{variance_md}: no table; regenerate it with python scripts/sign_map_variance.py")
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]
    table = pd.DataFrame(rows, columns=header)
    table = table.groupby("level", sort=False)[["start_p", "mean_p_variance"]].first().astype(float)
    return table.rename(columns={"mean_p_variance": "spread"})


def sign_map_runs(folder: Path) -> pd.DataFrame:
    """The sign map's result runs (``runs/LEVEL-CLIPPING.csv``): one row per run."""
    frames = []
    for path in sorted(folder.glob("*.csv")):
        level, clipping = path.stem.rsplit("-", 1)
        runs = pd.read_csv(path)
        runs = runs[runs["role"] == "result"].assign(level=level, condition_detail=clipping)
        frames.append(runs)
    return pd.concat(frames, ignore_index=True)


def committed_runs(experiments: Path) -> pd.DataFrame:
    """Every run of the four experiments: experiment, level, G, condition_detail, estimator, seed, lr,
    end_pass_at_1."""
    columns = ["experiment", "level", "group_size", "condition_detail", "estimator", "seed", "lr", "end_pass_at_1"]
    frames = [sign_map_runs(experiments / "sign-map" / "runs").assign(experiment="sign-map")]
    for name in ("remedies", "remedies-curriculum"):
        frames.append(pd.read_csv(experiments / name / "runs.csv").assign(experiment=name, condition_detail=""))
    batch = pd.read_csv(experiments / "batch-size" / "runs.csv")
    frames.append(
        batch.assign(experiment="batch-size", group_size=2, condition_detail="P" + batch["prompts"].astype(str))
    )
    runs = pd.concat([frame[columns] for frame in frames], ignore_index=True)
    missing = runs["end_pass_at_1"].isna()
    if missing.any():
        raise SystemExit(f"{int(missing.sum())} committed runs have no end_pass_at_1; regenerate their runs.csv")
    return runs


# ---------------------------------------------------------------- expected step-1 shares


def all_equal_share(spread: float, group_size: int, bound: str) -> float:
    """Expected share of G-groups whose rewards are all equal, from q = E[p(1 - p)]: exact at G = 2; at G = 4 the
    value at E[q^2]'s lower (``bound="low"``: E[q]^2) or upper (``"high"``: E[q]/4) bound."""
    if group_size == 2:
        return 1.0 - 2.0 * spread
    if group_size == 4:
        second = spread**2 if bound == "low" else spread / 4.0
        return 1.0 - 4.0 * spread + 2.0 * second
    raise SystemExit(f"G = {group_size}: the committed moments give the all-equal share only at G = 2 and 4")


def zero_advantage_share(estimator: str, start_p: float, spread: float) -> float:
    """Expected share of G = 2 groups whose advantages are all zero, as sampled (before a remedy acts), for
    ``estimator``: the probabilities of the four reward pairs, 00: 1 - pbar - q, 01 and 10: q each, 11: pbar - q
    (q = E[p(1 - p)]), summed over the pairs the registry's estimator gives all-zero advantages."""
    name, _ = split_remedies(estimator)
    pairs = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])  # [4, G = 2]
    weights = np.array([1.0 - start_p - spread, spread, spread, start_p - spread])
    zero = (compute_advantages(name, pairs) == 0).all(dim=1).numpy()
    return float(weights[zero].sum())


def with_shares(frame: pd.DataFrame, moments: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (level, group_size, estimator) with start_p, spread, all_equal_low/high and zero_advantage."""
    unknown = sorted(set(frame["level"]) - set(moments.index))
    if unknown:
        raise SystemExit(f"levels {unknown} are not in variance.md; run python scripts/sign_map_variance.py for them")
    out = frame.join(moments, on="level")
    for bound in BOUNDS:
        out[f"all_equal_{bound}"] = [
            all_equal_share(s, g, bound) for s, g in zip(out["spread"], out["group_size"], strict=True)
        ]
    out["zero_advantage"] = [
        zero_advantage_share(e, p, s) if g == 2 else np.nan
        for e, p, s, g in zip(out["estimator"], out["start_p"], out["spread"], out["group_size"], strict=True)
    ]
    return out


def cell_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (experiment, level, G, condition detail, estimator): mean end pass@1 over its seeds."""
    keys = ["experiment", "level", "group_size", "condition_detail", "estimator"]
    cells = runs.groupby(keys, sort=False).agg(seeds=("seed", "size"), end_pass_at_1=("end_pass_at_1", "mean"))
    return cells.reset_index()


# ---------------------------------------------------------------- R² and its interval


def r_squared(x: np.ndarray, y: np.ndarray) -> float:
    """R² of the least-squares line of y on x [n]; NaN when x or y takes one value."""
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1] ** 2)


def bootstrap_r_squared(x: np.ndarray, y: np.ndarray, cluster: np.ndarray) -> tuple[float, float, int]:
    """Percentile 95% interval of R² over ``RESAMPLES`` resamples of the clusters [n] (cells) with replacement,
    and how many resamples were kept (one whose x takes a single value has no R² and is dropped)."""
    rng = np.random.default_rng(SEED)
    labels, index = np.unique(cluster, return_inverse=True)
    members = [np.flatnonzero(index == i) for i in range(labels.size)]
    values = []
    for _ in range(RESAMPLES):
        rows = np.concatenate([members[i] for i in rng.integers(0, labels.size, labels.size)])
        value = r_squared(x[rows], y[rows])
        if not np.isnan(value):
            values.append(value)
    if not values:
        return float("nan"), float("nan"), 0
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high), len(values)


def ceiling(y: np.ndarray, condition: np.ndarray) -> float:
    """R² of y [n] on the mean of its condition: the share of the variance between conditions."""
    means = pd.Series(y).groupby(condition).transform("mean").to_numpy()
    return float(1.0 - np.sum((y - means) ** 2) / np.sum((y - y.mean()) ** 2))


# ---------------------------------------------------------------- the analyses


PREDICTORS = {  # label -> (share column, G kept)
    "all-equal share, G = 2 (exact)": ("all_equal_low", (2,)),
    "all-equal share, G = 2 and 4 (G = 4 at its lower bound)": ("all_equal_low", (2, 4)),
    "all-equal share, G = 2 and 4 (G = 4 at its upper bound)": ("all_equal_high", (2, 4)),
    "zero-advantage share, G = 2": ("zero_advantage", (2,)),
}


def analyse(frame: pd.DataFrame, column: str, cluster: np.ndarray) -> dict[str, float]:
    """R², its bootstrap interval over cells, the slope, the ceiling and the counts of one (frame, share)."""
    x, y = frame[column].to_numpy(float), frame["end_pass_at_1"].to_numpy(float)
    low, high, kept = bootstrap_r_squared(x, y, cluster)
    slope = float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else float("nan")
    return {
        "n": len(frame),
        "cells": int(np.unique(cluster).size),
        "shares": int(np.unique(x.round(12)).size),
        "r2": r_squared(x, y),
        "r2_low": low,
        "r2_high": high,
        "resamples": kept,
        "slope": slope,
        "ceiling": ceiling(y, x.round(12)),
    }


def _rows(scope: str, unit: str, frame: pd.DataFrame, predictors: dict[str, tuple[str, tuple[int, ...]]]) -> list[dict]:
    rows = []
    for label, (column, sizes) in predictors.items():
        kept = frame[frame["group_size"].isin(sizes)].reset_index(drop=True)
        if set(kept["group_size"]) != set(sizes) or np.ptp(kept[column].to_numpy(float)) == 0:
            continue  # a G missing (the row would repeat another), or one share value: no line to fit
        rows.append(
            {"scope": scope, "unit": unit, "predictor": label, **analyse(kept, column, kept["cell"].to_numpy())}
        )
    return rows


def analysis_table(runs: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Across cells and runs (all experiments, then each), then within each estimator (cells)."""
    rows = []
    for scope, part in [("all experiments", None), *[(name, name) for name in cells["experiment"].unique()]]:
        for unit, frame in (("cells", cells), ("runs", runs)):
            chosen = frame if part is None else frame[frame["experiment"] == part]
            rows += _rows(scope, unit, chosen, PREDICTORS)
    all_equal = {label: spec for label, spec in PREDICTORS.items() if spec[0].startswith("all_equal")}
    for estimator in sorted(cells["estimator"].unique()):
        rows += _rows(f"estimator {estimator}", "cells", cells[cells["estimator"] == estimator], all_equal)
    return pd.DataFrame(rows)


def labelled(runs: pd.DataFrame, moments: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, cells), each with its shares and a ``cell`` id shared by a cell and its runs."""
    cells = with_shares(cell_table(runs), moments)
    keys = ["experiment", "level", "group_size", "condition_detail", "estimator"]
    cells["cell"] = np.arange(len(cells))
    runs = with_shares(runs, moments).merge(cells[[*keys, "cell"]], on=keys, how="left")
    return runs, cells


# ---------------------------------------------------------------- the outputs


def _interval(row: pd.Series) -> str:
    return f"[{row['r2_low']:.3f}, {row['r2_high']:.3f}]" if row["resamples"] else "-"


def markdown(table: pd.DataFrame, cells: pd.DataFrame, runs: pd.DataFrame) -> str:
    """The analyses as a Markdown page."""
    lines = [
        "# Early degenerate share against held-out end pass@1",
        "",
        "`python scripts/early_warning_calibration.py`. Share = the start policy's expected step-1 share "
        "(scripts/early_warning_calibration.py says how it is computed from the committed files); end = "
        "held-out end pass@1. R² of the least-squares line, 95% percentile bootstrap over cells "
        f"({RESAMPLES} resamples, seed {SEED}); ceiling = R² of the score on its share's mean (the most any "
        "function of the share explains); slope in pass@1 per unit share.",
        "",
        f"{len(cells)} cells, {len(runs)} runs, {cells['level'].nunique()} difficulty levels.",
        "",
        "| scope | unit | predictor | n | cells | shares | R² | 95% CI | ceiling | slope |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        lines.append(
            f"| {row['scope']} | {row['unit']} | {row['predictor']} | {row['n']} | {row['cells']} | "
            f"{row['shares']} | {row['r2']:.3f} | {_interval(row)} | {row['ceiling']:.3f} | "
            f"{row['slope']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def figure(cells: pd.DataFrame, table: pd.DataFrame, path: Path) -> None:
    """Cell mean end pass@1 against the all-equal share (G = 4 at the middle of its bounds, bars to them), with
    the G = 2 least-squares line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {name: f"C{i}" for i, name in enumerate(cells["experiment"].unique())}
    for (experiment, size), part in cells.groupby(["experiment", "group_size"], sort=False):
        middle = (part["all_equal_low"] + part["all_equal_high"]) / 2
        ax.errorbar(
            middle,
            part["end_pass_at_1"],
            xerr=(part["all_equal_high"] - part["all_equal_low"]) / 2,
            fmt="o" if size == 2 else "s",
            mfc="none" if size == 4 else colours[experiment],
            color=colours[experiment],
            alpha=0.7,
            ms=4,
            label=f"{experiment}, G = {size}",
        )
    pairs = cells[cells["group_size"] == 2]
    slope, intercept = np.polyfit(pairs["all_equal_low"], pairs["end_pass_at_1"], 1)
    grid = np.linspace(pairs["all_equal_low"].min(), pairs["all_equal_low"].max(), 50)
    fit = table[(table["scope"] == "all experiments") & (table["unit"] == "cells")].iloc[0]
    ax.plot(
        grid,
        intercept + slope * grid,
        "k--",
        label=f"G = 2 fit: R² {fit['r2']:.2f} {_interval(fit)}, {fit['cells']} cells",
    )
    ax.set_xlabel("expected step-1 all-equal-reward share (start policy)")
    ax.set_ylabel("held-out end pass@1 (cell mean over seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def write(experiments: Path, out: Path, *, with_figure: bool = True) -> pd.DataFrame:
    """Reads the committed files under ``experiments`` and writes table.md, table.csv, cells.csv (and fit.png)."""
    moments = level_moments(experiments / "sign-map" / "variance.md")
    runs, cells = labelled(committed_runs(experiments), moments)
    table = analysis_table(runs, cells)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(markdown(table, cells, runs))
    table.to_csv(out / "table.csv", index=False, float_format="%.6f")
    cells.drop(columns="cell").to_csv(out / "cells.csv", index=False, float_format="%.6f")
    if with_figure:
        figure(cells, table, out / "fit.png")
    write_measured(experiments, out, moments)
    return table


# ---------------------------------------------------------------- measured steps 1-3 shares

MEASURED_STEPS = (1, 2, 3)  # the steps --stop-when-dead watches
DEMO_LEVEL = "mixed"  # experiments/demo/compare.yaml runs the reverse task's default options: markers "+*", lengths 3-6
SWEEP_COLUMNS = {"starvation/uniform": "uniform", "starvation/degenerate": "degenerate"}
RUN_COLUMNS = ["run_id", "experiment", "level", "condition", "estimator", "group_size", "seed", "lr"]
SHARE_COLUMNS = ["uniform", "degenerate", "end_pass_at_1"]


def _level_and_gn(name: str) -> tuple[str, str]:
    return name.rsplit("-G", 1)[0], ""  # remedies-new: LEVEL-GN (G is a column of runs.csv)


def _level_and_clipping(name: str) -> tuple[str, str]:
    level, clipping = name.rsplit("-", 1)  # sign-map: LEVEL-clip1, LEVEL-noclip
    return level, clipping


def _grid_level(name: str) -> tuple[str, str]:
    return name.removeprefix("grid-").rsplit("-lr", 1)[0], ""  # batch-size: grid-LEVEL-lrLR (P is the variant)


def _level_and_arm_set(name: str) -> tuple[str, str]:
    return name.rsplit("-", 1)[0], ""  # noise-direction: LEVEL-p16, LEVEL-matched (P is the variant)


SWEEP_LAYOUTS = {  # experiment -> (its sweeps' folder pattern, folder name -> (level, condition), committed file)
    "remedies-new": ("*-G*", _level_and_gn, "measured_runs.csv"),
    "sign-map": ("*clip*", _level_and_clipping, "measured_runs_sign-map.csv"),
    "batch-size": ("grid-*", _grid_level, "measured_runs_batch-size.csv"),
    "noise-direction": ("*-*", _level_and_arm_set, "measured_runs_noise-direction.csv"),
}


def _early_means(steps: pd.DataFrame, columns: dict[str, str], source: str) -> pd.DataFrame:
    """Per run_id: the mean over ``MEASURED_STEPS`` of each column in ``columns`` (renamed), every step required."""
    missing = sorted({"run_id", "step", *columns} - set(steps.columns))
    if missing:
        raise SystemExit(f"{source}: no column(s) {missing}; rerun the sweep with this grpolab version")
    early = steps[steps["step"].isin(MEASURED_STEPS)]
    counts = early.groupby("run_id")["step"].nunique()
    short = sorted(set(steps["run_id"]) - set(counts[counts == len(MEASURED_STEPS)].index))
    if short:
        raise SystemExit(f"{source}: run {short[0]} lacks one of steps {list(MEASURED_STEPS)}; rerun it or drop it")
    means = early.groupby("run_id")[list(columns)].mean().rename(columns=columns)
    if means.isna().any().any():
        raise SystemExit(f"{source}: a run has no {list(columns)} value at steps 1-3; rerun it")
    return means.reset_index()


def _condition(folder_part: str, variants: pd.Series) -> pd.Series:
    """The condition of each run: the folder's part (clipping) and ``P<n>`` for a prompts_per_step variant."""
    prompts = variants.map(lambda v: v if isinstance(v, str) else "").str.extract(
        r"prompts_per_step=(\d+)", expand=False
    )
    parts = [pd.Series(folder_part, index=variants.index), ("P" + prompts).fillna("")]
    return parts[0].str.cat(parts[1], sep="-").str.strip("-")


def extract_sweeps(folder: Path, experiment: str) -> pd.DataFrame:
    """One row per result run of each of ``experiment``'s sweeps under ``folder`` (their runs.csv and
    metrics.parquet): ``RUN_COLUMNS``, then uniform, degenerate (steps 1-3 means) and end_pass_at_1."""
    pattern, parse, _ = SWEEP_LAYOUTS[experiment]
    sweeps = sorted(path for path in folder.glob(pattern) if (path / "metrics.parquet").is_file())
    if not sweeps:
        raise SystemExit(f"{folder}: no {pattern} folder with a metrics.parquet; pass the {experiment} runs folder")
    frames = []
    for sweep in sweeps:
        runs = pd.read_csv(sweep / "runs.csv")
        runs = runs[runs["role"] == "result"]
        early = _early_means(pd.read_parquet(sweep / "metrics.parquet"), SWEEP_COLUMNS, str(sweep))
        absent = sorted(set(runs["run_id"]) - set(early["run_id"]))
        if absent:
            raise SystemExit(f"{sweep}: result run {absent[0]} has no metrics; rerun the sweep to finish it")
        level, folder_part = parse(sweep.name)
        variants = runs["variant"] if "variant" in runs else pd.Series("", index=runs.index)
        runs = runs.assign(experiment=experiment, level=level, condition=_condition(folder_part, variants))
        frames.append(runs.merge(early, on="run_id"))
    return pd.concat(frames, ignore_index=True)[[*RUN_COLUMNS, *SHARE_COLUMNS]]


def extract_remedies_new(folder: Path) -> pd.DataFrame:
    """remedies-new's result runs (``LEVEL-GN`` sweeps), without the condition and lr columns its file has never
    had."""
    return extract_sweeps(folder, "remedies-new").drop(columns=["condition", "lr"])


def demo_runs(folder: Path) -> pd.DataFrame:
    """The demo's result runs with their measured steps 1-3 all-equal share (steps.csv has no degenerate share)."""
    early = _early_means(pd.read_csv(folder / "steps.csv"), {"uniform": "uniform"}, str(folder / "steps.csv"))
    runs = pd.read_csv(folder / "runs.csv").merge(early, on="run_id", how="left", validate="one_to_one")
    if runs["uniform"].isna().any():
        raise SystemExit(f"{folder}: a run of runs.csv has no rows in steps.csv; regenerate the demo")
    return runs.assign(experiment="demo", level=DEMO_LEVEL, degenerate=np.nan)


def measured_runs(experiments: Path) -> pd.DataFrame:
    """The demo's result runs and every extracted experiment's, with measured shares and a ``cell`` per
    experiment x level x condition x estimator x G."""
    frames = [demo_runs(experiments / "demo")]
    for experiment, (_, _, name) in SWEEP_LAYOUTS.items():
        path = experiments / "early-warning" / name
        if not path.is_file():
            raise SystemExit(
                f"{path} is missing; write it with python scripts/early_warning_calibration.py extract "
                f"--{experiment} runs/{experiment}"
            )
        frames.append(pd.read_csv(path))
    runs = pd.concat(frames, ignore_index=True)
    runs["condition"] = runs["condition"].fillna("")
    runs = runs[[*RUN_COLUMNS, *SHARE_COLUMNS]]
    keys = ["experiment", "level", "condition", "estimator", "group_size"]
    runs["cell"] = runs.groupby(keys, sort=False).ngroup()
    return runs


MEASURED_PREDICTORS = {  # label -> share column
    "measured all-equal share, steps 1-3": "uniform",
    "measured zero-advantage share, steps 1-3": "degenerate",
    "expected step-1 all-equal share (G = 4 at its lower bound)": "all_equal_low",
    "expected step-1 all-equal share (G = 4 at its upper bound)": "all_equal_high",
}
FIRST_MEASURED = ("demo", "remedies-new")  # the two experiments measured first (the scope of the first rows)
SHORT_RUNS = ("noise-direction",)  # its runs train 10 steps; every other measured experiment's train 20


def _measured_scopes(cells: pd.DataFrame) -> list[tuple[str, object, tuple[str, ...]]]:
    """(scope, row filter, units): all experiments, those of 20 steps, the first two, each one, then each one's G
    where it has two."""
    both = ("cells", "runs")
    scopes = [
        ("all measured experiments", lambda f: f["experiment"].notna(), both),
        ("20-step experiments", lambda f: ~f["experiment"].isin(SHORT_RUNS), both),
        (" and ".join(FIRST_MEASURED), lambda f: f["experiment"].isin(FIRST_MEASURED), both),
    ]
    scopes += [(name, lambda f, n=name: f["experiment"] == n, both) for name in cells["experiment"].unique()]
    sizes = cells.groupby("experiment", sort=False)["group_size"].unique()
    scopes += [
        (f"{name}, G = {size}", lambda f, n=name, g=size: (f["experiment"] == n) & (f["group_size"] == g), ("cells",))
        for name, values in sizes.items()
        if len(values) > 1
        for size in values
    ]
    return scopes


def measured_table(runs: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """R² of end pass@1 on each share over the scopes of ``_measured_scopes`` (an experiment's G: cells only).
    The ceiling is kept for the expected share only: a measured share differs from cell to cell, so any function
    of it can fit every cell."""
    rows = []
    for scope, select, units in _measured_scopes(cells):
        for unit in units:
            frame = cells if unit == "cells" else runs
            chosen = frame[select(frame)]
            for label, column in MEASURED_PREDICTORS.items():
                kept = chosen.dropna(subset=[column]).reset_index(drop=True)
                if kept.empty or np.ptp(kept[column].to_numpy(float)) == 0:
                    continue
                stats = analyse(kept, column, kept["cell"].to_numpy())
                if column in SWEEP_COLUMNS.values():
                    stats.update(shares=np.nan, ceiling=np.nan)
                rows.append({"scope": scope, "unit": unit, "predictor": label, **stats})
    return pd.DataFrame(rows)


def measured_cells(runs: pd.DataFrame, moments: pd.DataFrame) -> pd.DataFrame:
    """Per cell: seeds, means of the measured shares and end pass@1, and the expected step-1 shares."""
    keys = ["cell", "experiment", "level", "condition", "group_size", "estimator"]
    cells = runs.groupby(keys, sort=False).agg(
        seeds=("seed", "size"),
        uniform=("uniform", "mean"),
        degenerate=("degenerate", "mean"),
        end_pass_at_1=("end_pass_at_1", "mean"),
    )
    return with_shares(cells.reset_index(), moments)


def agreement(cells: pd.DataFrame) -> list[str]:
    """Markdown lines: Pearson r of the cells' measured steps 1-3 all-equal share with the expected step-1 one,
    over the first two experiments and over all."""
    lines = []
    for scope, part in (
        (" and ".join(FIRST_MEASURED), cells[cells["experiment"].isin(FIRST_MEASURED)]),
        ("all", cells),
    ):
        for bound in BOUNDS:
            x, y = part["uniform"].to_numpy(float), part[f"all_equal_{bound}"].to_numpy(float)
            r = float(np.corrcoef(x, y)[0, 1])
            lines.append(
                f"- {scope}: measured steps 1-3 all-equal share vs expected step-1 share (G = 4 at its {bound} "
                f"bound): Pearson r = {r:.3f} over {len(part)} cells ({int(np.unique(y.round(12)).size)} expected "
                f"values); mean measured - expected = {float(np.mean(x - y)):+.3f}"
            )
    return lines


def reproduction(runs: pd.DataFrame, experiments: Path) -> pd.DataFrame:
    """Per rerun experiment (sign-map, batch-size): its runs' lr and end pass@1 against the committed per-run rows
    of the same (level, condition, estimator, G, seed): how many pair, how many ran at the committed lr, how many
    end scores are identical, the largest and the mean difference."""
    committed = committed_runs(experiments).rename(columns={"condition_detail": "condition"})
    keys = ["experiment", "level", "condition", "estimator", "group_size", "seed"]
    rows = []
    for experiment in ("sign-map", "batch-size"):
        rerun = runs[runs["experiment"] == experiment]
        if rerun.empty:
            continue
        paired = rerun.merge(committed, on=keys, how="inner", suffixes=("", "_committed"), validate="one_to_one")
        difference = (paired["end_pass_at_1"] - paired["end_pass_at_1_committed"]).abs()
        rows.append(
            {
                "experiment": experiment,
                "reruns": len(rerun),
                "paired": len(paired),
                "same_lr": int((paired["lr"] == paired["lr_committed"]).sum()),
                "identical": int((difference == 0).sum()),
                "largest_difference": float(difference.max()),
                "mean_difference": float((paired["end_pass_at_1"] - paired["end_pass_at_1_committed"]).mean()),
                "conditions": ", ".join(sorted(set(rerun["level"] + " " + rerun["condition"]))),
            }
        )
    return pd.DataFrame(rows)


def _ceiling_text(row: pd.Series) -> str:
    return "-" if np.isnan(row["ceiling"]) else f"{row['ceiling']:.3f}"


def measured_markdown(table: pd.DataFrame, cells: pd.DataFrame, runs: pd.DataFrame, repeats: pd.DataFrame) -> str:
    """The measured-share analyses as a Markdown page."""
    lines = [
        "# Measured early shares against held-out end pass@1",
        "",
        "`python scripts/early_warning_calibration.py`. Measured share = the run's mean over steps "
        f"{MEASURED_STEPS[0]}-{MEASURED_STEPS[-1]} of `starvation/uniform` (all-equal rewards) or "
        "`starvation/degenerate` (all-zero advantages), from experiments/demo/steps.csv and "
        "experiments/early-warning/measured_runs*.csv (`python scripts/early_warning_calibration.py extract "
        "--remedies-new runs/remedies-new --sign-map runs/sign-map --batch-size runs/batch-size --noise-direction "
        "runs/noise-direction`); the demo has no degenerate share. Cell = experiment x level x condition x "
        f"estimator x G, mean over seeds. R² of the least-squares line, 95% percentile bootstrap over cells "
        f"({RESAMPLES} resamples, seed {SEED}; a run-level row resamples whole cells); ceiling = R² of the score "
        "on its share's mean, for the expected share only (a measured share differs from cell to cell); slope in "
        "pass@1 per unit share. End pass@1 is each run's own: the reruns' scores, never the committed ones.",
        "",
        f"{len(cells)} cells, {len(runs)} runs: "
        + ", ".join(
            f"{name} {part['cell'].nunique()} cells / {len(part)} runs ({', '.join(part['level'].unique())})"
            for name, part in runs.groupby("experiment", sort=False)
        )
        + ".",
        "",
        "| scope | unit | predictor | n | cells | R² | 95% CI | ceiling | slope |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        lines.append(
            f"| {row['scope']} | {row['unit']} | {row['predictor']} | {row['n']} | {row['cells']} | "
            f"{row['r2']:.3f} | {_interval(row)} | {_ceiling_text(row)} | {row['slope']:.3f} |"
        )
    lines += [
        "",
        *agreement(cells),
        "",
        "Reruns against the committed per-run end pass@1 (same level, condition, estimator, G and seed):",
        "",
        "| experiment | reruns | paired | same lr | identical | largest difference | "
        "mean difference (rerun - committed) | conditions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, row in repeats.iterrows():
        lines.append(
            f"| {row['experiment']} | {row['reruns']} | {row['paired']} | {row['same_lr']} | {row['identical']} | "
            f"{row['largest_difference']:.6f} | {row['mean_difference']:+.6f} | {row['conditions']} |"
        )
    return "\n".join(lines) + "\n"


def write_measured(experiments: Path, out: Path, moments: pd.DataFrame) -> pd.DataFrame:
    """Writes measured.md, measured.csv and measured_cells.csv from the committed measured shares."""
    runs = measured_runs(experiments)
    shares = with_shares(runs, moments)  # run ids repeat across experiments: keep the row order, not a merge
    runs = runs.assign(all_equal_low=shares["all_equal_low"], all_equal_high=shares["all_equal_high"])
    cells = measured_cells(runs, moments)
    table = measured_table(runs, cells)
    repeats = reproduction(runs, experiments)
    (out / "measured.md").write_text(measured_markdown(table, cells, runs, repeats))
    table.to_csv(out / "measured.csv", index=False, float_format="%.6f")
    cells.drop(columns="cell").to_csv(out / "measured_cells.csv", index=False, float_format="%.6f")
    return table


def extract(arguments: argparse.Namespace) -> None:
    """Writes early-warning/measured_runs*.csv for each experiment whose runs folder was given."""
    given = {name: getattr(arguments, name.replace("-", "_")) for name in SWEEP_LAYOUTS}
    if not any(given.values()):
        raise SystemExit(
            "extract: no runs folder given; pass --remedies-new, --sign-map, --batch-size or --noise-direction"
        )
    for experiment, folder in given.items():
        if folder is None:
            continue
        runs = extract_remedies_new(folder) if experiment == "remedies-new" else extract_sweeps(folder, experiment)
        path = arguments.experiments / "early-warning" / SWEEP_LAYOUTS[experiment][2]
        runs.to_csv(path, index=False, float_format="%.6f")
        print(f"{path}: {len(runs)} result runs")


def main() -> None:
    arguments = _arguments()
    if arguments.command == "extract":
        extract(arguments)
        return
    table = write(arguments.experiments, arguments.out, with_figure=not arguments.no_figure)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
