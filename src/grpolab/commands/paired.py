"""``grpolab eval ... --against B`` and ``grpolab eval --compare DIR --arms A,B``: the paired difference of pass@k
for every k with its simultaneous 95% band over k (``grpolab.paired.sources``, ``grpolab.paired.band``),
printed as a table or as JSON. Nothing is sampled again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.progress import results_console as console

PROMPT_CLAIM = ("prompt-level band (prompts resampled): a claim about these two checkpoints on prompts like these, "
                "not about the training method")
SEED_CLAIM = ("seed-level interval (seeds resampled): a claim about the estimator, since a new run is a new seed")


def run_against(args: Any) -> int:
    from grpolab.paired.sources import compare_sides, side_from_run, side_from_samples

    if args.from_samples:
        if len(args.from_samples) != 1:
            raise UserError("--against compares one samples file with one other: give --from-samples one file")
        a, b = (side_from_samples(path, args.verifier) for path in (args.from_samples[0], args.against))
    else:
        if not args.model:
            raise UserError("--against needs the other side: --model RUN_A (or --from-samples FILE) --against B")
        a, b = side_from_run(args.model), side_from_run(args.against)
    data = compare_sides(a, b, resamples=args.resamples)
    return _emit(args, data, lambda: _print_sides(data))


def run_compare(args: Any) -> int:
    import pandas as pd

    from grpolab.paired.sources import arm_pairs

    arms = [name.strip() for name in (args.arms or "").split(",") if name.strip()]
    if len(arms) != 2:
        raise UserError("--compare DIR needs --arms A,B: the two arms to pair (estimators as the report names them)")
    path = Path(args.compare) / "results.parquet"
    if not path.is_file():
        raise UserError(f"{args.compare}: no results.parquet; give the --out of grpolab compare")
    data = {"compare": str(args.compare), "pairs": arm_pairs(pd.read_parquet(path), arms[0], arms[1],
                                                            resamples=args.resamples)}
    return _emit(args, data, lambda: [_print_pair(pair) for pair in data["pairs"]])


def _emit(args: Any, data: dict[str, Any], show: Any) -> int:
    if args.out:
        atomic_write_text(args.out, json.dumps(data, indent=1))
    if args.json:
        print(json.dumps(data))
    else:
        show()
    return 0


def _line(text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def band_lines(band: dict[str, Any], label_a: str, label_b: str) -> list[str]:
    """The table of a ``PairedBand.to_dict()``: k, both pass@k, A - B, the pointwise and simultaneous intervals."""
    level = round(100 * band["level"])
    lines = [f"{'k':>4} {'A':>8} {'B':>8} {'A - B':>8}  {f'{level}% pointwise':>18}  {f'{level}% band over k':>18}"]
    for j, k in enumerate(band["ks"]):
        flat = band["se"][j] == 0  # every prompt's difference the same: a zero-width interval would read as certainty
        same = f"each prompt {band['difference'][j]:+.4f}"
        lines.append(f"{k:>4} {band['pass_a'][j]:>8.4f} {band['pass_b'][j]:>8.4f} {band['difference'][j]:>+8.4f}  "
                     f"{same if flat else _pair(band['pointwise_low'][j], band['pointwise_high'][j]):>18}  "
                     f"{same if flat else _pair(band['band_low'][j], band['band_high'][j]):>18}")
    excluded = band["excludes_zero"]
    lines.append(f"A = {label_a}, B = {label_b}; the band excludes 0 at k = {', '.join(map(str, excluded))}"
                 if excluded else f"A = {label_a}, B = {label_b}; the band holds 0 at every k")
    return lines


def _pair(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "none (no spread)"
    return f"[{low:+.4f}, {high:+.4f}]"


def _print_sides(data: dict[str, Any]) -> None:
    band = data["prompt_level"]
    _line(f"pass@k of {data['a']} (A) against {data['b']} (B): {band['prompts']} prompts, paired")
    for note in data["notes"]:
        _line(note)
    _line(f"{PROMPT_CLAIM}; sup-t critical value {band['critical']:.3f}, {band['resamples']} resamples, seed "
          f"{band['seed']}")
    for line in band_lines(band, data["a"], data["b"]):
        _line(line)


def _print_pair(pair: dict[str, Any]) -> None:
    band = pair["prompt_level"]
    _line(f"{pair['arm_a']} (A) against {pair['arm_b']} (B) at G = {pair['group_size']}: seeds "
          f"{', '.join(map(str, pair['seeds']))}, {band['prompts']} prompts")
    _line(f"{PROMPT_CLAIM} (each arm's runs pooled per prompt, n = seeds x {pair['n']})")
    for line in band_lines(band, pair["arm_a"], pair["arm_b"]):
        _line(line)
    seed = pair["seed_level"]
    if seed is None:
        _line("seed-level interval: needs 2 or more seeds run by both arms; with one, no claim about the estimator")
    else:
        _line(SEED_CLAIM)
        _line(f"{'k':>4} {'A - B':>8}  {'95% t over seeds':>18}  {'p (Holm over k)':>15}")
        for j, k in enumerate(seed["ks"]):
            _line(f"{k:>4} {seed['difference'][j]:>+8.4f}  {_pair(seed['low'][j], seed['high'][j]):>18}  "
                  f"{seed['p_holm'][j]:>15.4f}")
    _line("")
