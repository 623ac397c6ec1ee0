"""The map of when the sign advantage helps: each estimator's gain over dr_grpo against the start success p.

    python scripts/sign_map.py run --out runs/sign-map          # the sweeps (resumable; about an hour on 2 cores)
    python scripts/sign_map.py table --out runs/sign-map        # experiments/sign-map/map.csv, map.md and map.png
    python scripts/sign_map.py table --out experiments/sign-map/runs   # the same from the kept runs.csv copies

``run`` makes one ``grpolab compare`` per (difficulty level, clipping): the embedded model on the ``reverse``
task with the level's task options (docs/when-sign-helps.md lists their start pass@1), the estimators sign,
dr_grpo, reinforce and nsr at G = 2 and 4, each at its own lr chosen on validation data from a wide grid (so
that the choice is interior: ``table`` says where it is not), then 10 fresh seeds on the test split; once with
``max_grad_norm`` 1 (the default) and once with 0 (no clipping). A finished sweep is skipped, so an interrupted
``run`` resumes.

``table`` reads each sweep's ``runs.csv`` (``OUT/LEVEL-CLIP/runs.csv``, or its kept copy ``OUT/LEVEL-CLIP.csv``) and
writes one row per (level, clipping, G, estimator): the start p, the end pass@1 (mean, sd, n), the chosen lr and
whether it is interior to the grid, the gain over dr_grpo at the same (level, clipping, G) paired by seed
(``grpolab.pairing``: the paired t-test and its 95% interval, Welch's only with ``--unpaired``, the output naming
the test), the variance view's predicted SNR ratio 4p(1-p)/(1-1/G) (``grpolab.diagnostics.variance``), and the
means over seeds of the compute each run spent (``TRAINED``: every arm ran the same steps, so sign, whose advantage
is never 0, trains more rows than dr_grpo; "not recorded" for runs made before grpolab counted it). The figure plots
the gains against start p beside the prediction. The Markdown table ends with the verdict: in how many cells the
sign of sign's measured gain (where significant) matches the side of 1 the prediction falls on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from grpolab.advantages import display_colors
from grpolab.diagnostics.variance import FIXED_BASELINES, snr_ratio_fixed_vs_centred
from grpolab.pairing import UNPAIRED_FLAG, compare_arms, which_tests

LEVELS = {
    "star-len6": {"markers": "*", "lengths": [6, 6]},
    "star-len4": {"markers": "*", "lengths": [4, 4]},
    "mixed": {"markers": "+*", "lengths": [3, 6]},
    "plus-len6": {"markers": "+", "lengths": [6, 6]},
    "plus": {"markers": "+", "lengths": [3, 6]},
}
CLIPPING = {"clip1": 1.0, "noclip": 0.0}
ESTIMATORS = "sign,dr_grpo,reinforce,nsr"
LRS = "1e-4,3e-4,1e-3,3e-3,1e-2"
SEEDS = 10
REFERENCE = "dr_grpo"
TRAINED = ("optimizer_steps", "trained_sequences", "trained_tokens", "forward_tokens", "sampled_tokens")
"""The compute columns of grpolab compare's runs.csv (``grpolab.metric_keys.COMPUTE``) the map carries."""


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["run", "table"])
    parser.add_argument("--out", type=Path, default=Path("runs/sign-map"), help="folder of the sweeps")
    parser.add_argument("--dest", type=Path, default=Path("experiments/sign-map"), help="where table writes")
    parser.add_argument("--levels", default=",".join(LEVELS), help="comma-separated level names")
    parser.add_argument("--clipping", default=",".join(CLIPPING), help="comma-separated: clip1, noclip")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lrs", default=LRS, help="the lr grid each estimator chooses from")
    parser.add_argument("--estimators", default=ESTIMATORS)
    parser.add_argument("--extra", default="", help="more compare flags, e.g. '--eval-limit 50' (smoke tests)")
    parser.add_argument(UNPAIRED_FLAG, action="store_true", dest="unpaired",
                        help="table: Welch's test although the arms share seeds (not the default; the output says so)")
    return parser.parse_args()


def _cells(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [(level, clip) for clip in args.clipping.split(",") for level in args.levels.split(",")]


def _compare_command(args: argparse.Namespace, level: str, clip: str) -> list[str]:
    return [str(Path(sys.executable).with_name("grpolab")), "compare", "--out", str(args.out / f"{level}-{clip}"),
            "--estimators", args.estimators, "--group-sizes", "2,4", "--seeds", str(args.seeds), "--lrs", args.lrs,
            "--steps", str(args.steps), "--task-options", json.dumps(LEVELS[level]),
            "--max-grad-norm", str(CLIPPING[clip]), "--workers", str(args.workers), "--no-report", *args.extra.split()]


def run(args: argparse.Namespace) -> None:
    for level, clip in _cells(args):
        command = _compare_command(args, level, clip)
        print("$", " ".join(command[1:]), flush=True)
        subprocess.run(command, check=False)


def _gain(arm: pd.DataFrame, reference: pd.DataFrame, unpaired: bool) -> dict:
    """The arm's end pass@1 minus the reference's, paired by seed (``grpolab.pairing.compare_arms``; Welch only
    with ``unpaired``): the mean difference, the half-width of its 95% interval, its p value and the test."""
    if arm["estimator"].iloc[0] == REFERENCE:
        return {"gain_vs_dr_grpo": 0.0, "gain_ci_half": float("nan"), "gain_p": float("nan"), "test": ""}
    result = compare_arms(arm.set_index("seed")["end_pass_at_1"], reference.set_index("seed")["end_pass_at_1"],
                          unpaired=unpaired)
    return {"gain_vs_dr_grpo": result["mean_difference"],
            "gain_ci_half": (result["difference_high"] - result["difference_low"]) / 2, "gain_p": result["p"],
            "test": result["test"], "seeds_shared": result["seeds_shared"], "unpaired": result["unpaired"]}


def _cell_rows(runs: pd.DataFrame, level: str, clip: str, unpaired: bool = False) -> list[dict]:
    results, grid = runs[runs["role"] == "result"], runs[runs["role"] == "selection"]
    rows = []
    for (size, estimator), arm in results.groupby(["group_size", "estimator"]):
        reference = results[(results["group_size"] == size) & (results["estimator"] == REFERENCE)]
        tried = sorted(grid[(grid["group_size"] == size) & (grid["estimator"] == estimator)]["lr"].unique())
        lr = float(arm["lr"].iloc[0])
        start_p = float(arm["start_pass_at_1"].mean())
        rows.append({"level": level, "clipping": clip, "group_size": int(size), "estimator": estimator,
                     "start_p": start_p, "end_mean": float(arm["end_pass_at_1"].mean()),
                     "end_sd": float(arm["end_pass_at_1"].std(ddof=1)), "n": len(arm), "lr": lr,
                     "lr_interior": bool(tried) and tried[0] < lr < tried[-1],
                     **_gain(arm, reference, unpaired),
                     "predicted_snr_ratio": _predicted(estimator, start_p, int(size)), **_trained(arm)})
    return rows


def _trained(arm: pd.DataFrame) -> dict[str, float]:
    """The means over the arm's seeds of ``TRAINED``; NaN for a column some seed lacks (not recorded)."""
    return {name: float(arm[name].mean()) if name in arm and arm[name].notna().all() else float("nan")
            for name in TRAINED}


def _predicted(estimator: str, start_p: float, size: int) -> float:
    """The variance view's SNR^2 ratio over dr_grpo (1 for dr_grpo itself, NaN for an estimator it does not cover)."""
    if estimator == REFERENCE:
        return 1.0
    if estimator not in FIXED_BASELINES:
        return float("nan")
    return float(snr_ratio_fixed_vs_centred(min(max(start_p, 0.0), 1.0), size, FIXED_BASELINES[estimator]))


def _map_table(args: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for level, clip in _cells(args):
        path = args.out / f"{level}-{clip}" / "runs.csv"
        path = path if path.is_file() else args.out / f"{level}-{clip}.csv"  # a kept copy (experiments/sign-map/runs)
        if path.is_file():
            rows += _cell_rows(pd.read_csv(path), level, clip, args.unpaired)
        else:
            print(f"missing: {path} (run it first)", file=sys.stderr)
    return pd.DataFrame(rows)


def _verdict(table: pd.DataFrame) -> str:
    lines = []
    for estimator in (name for name in FIXED_BASELINES if name in set(table["estimator"])):
        arm = table[table["estimator"] == estimator]
        significant = arm[arm["gain_p"] < 0.05]
        agree = int(((significant["gain_vs_dr_grpo"] > 0) == (significant["predicted_snr_ratio"] > 1)).sum())
        wins, losses = int((significant["gain_vs_dr_grpo"] > 0).sum()), int((significant["gain_vs_dr_grpo"] < 0).sum())
        lines.append(f"- {estimator}: significantly different from dr_grpo ({_test_name(arm)} p < 0.05, unadjusted; "
                     "scripts/sign_map_verdicts.py Holm-adjusts and counts each condition once) in "
                     f"{len(significant)} of {len(arm)} cells ({wins} better, {losses} worse); in {agree} of those "
                     f"{len(significant)} the direction is the side of 1 that the predicted SNR ratio falls on.")
    return "\n".join([which_tests(table[table["estimator"] != REFERENCE].to_dict("records")), *lines])


def _test_name(arm: pd.DataFrame) -> str:
    tests = sorted(set(arm["test"]))
    return " / ".join(tests)


def _figure(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clips, sizes = sorted(table["clipping"].unique()), sorted(table["group_size"].unique())
    figure, axes = plt.subplots(len(clips), len(sizes), figsize=(5 * len(sizes), 3.6 * len(clips)), squeeze=False)
    grid_p = np.linspace(0.01, 0.99, 99)
    colors = display_colors(sorted(table["estimator"].unique()))
    for row, clip in enumerate(clips):
        for col, size in enumerate(sizes):
            ax = axes[row][col]
            cell = table[(table["clipping"] == clip) & (table["group_size"] == size)]
            for estimator, arm in cell[cell["estimator"] != REFERENCE].groupby("estimator"):
                arm = arm.sort_values("start_p")
                ax.errorbar(arm["start_p"], 100 * arm["gain_vs_dr_grpo"], yerr=100 * arm["gain_ci_half"],
                            marker="o", capsize=3, label=estimator, color=colors[estimator])
            ax.axhline(0, color="grey", lw=0.8)
            ax.set(title=f"G = {size}, {clip}", xlabel="start pass@1 (p)", ylabel="gain over dr_grpo (points)")
            twin = ax.twinx()
            for estimator in (name for name in FIXED_BASELINES if name in colors):
                twin.plot(grid_p, snr_ratio_fixed_vs_centred(grid_p, int(size), FIXED_BASELINES[estimator]), "--",
                          color=colors[estimator], lw=1, label=f"predicted SNR² ratio, {estimator}")
            twin.axhline(1, color="k", lw=0.5, ls=":")
            twin.set_ylabel("predicted SNR² ratio over dr_grpo")
            twin.set_ylim(0, 3)
            if row == 0 and col == 0:
                ax.legend(loc="lower left", fontsize=8)
                twin.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _markdown(frame: pd.DataFrame) -> str:
    cells = [[_cell(column, v) for column, v in zip(frame.columns, row, strict=True)]
             for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def _cell(column: str, value: object) -> str:
    if column in TRAINED:  # counts: in full, and named as missing rather than shown as nan
        return "not recorded" if pd.isna(value) else f"{value:.0f}"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def table(args: argparse.Namespace) -> None:
    data = _map_table(args)
    if data.empty:
        raise SystemExit(f"no finished sweep under {args.out}; run: python scripts/sign_map.py run --out {args.out}")
    args.dest.mkdir(parents=True, exist_ok=True)
    verdict, data = _verdict(data), data.drop(columns=["seeds_shared", "unpaired"])
    data.to_csv(args.dest / "map.csv", index=False)
    shown = data.assign(**{c: (100 * data[c]).round(1) for c in ("start_p", "end_mean", "end_sd",
                                                                   "gain_vs_dr_grpo", "gain_ci_half")})
    text = _markdown(shown) + "\n\n" + verdict + "\n"
    (args.dest / "map.md").write_text(text)
    _figure(data, args.dest / "map.png")
    print(text)


if __name__ == "__main__":
    arguments = _arguments()
    run(arguments) if arguments.action == "run" else table(arguments)
