"""``grpolab plan``: the seeds a comparison needs, from a pilot ``grpolab compare`` folder (each arm's variance split
into training seed, evaluation sampling and prompt; the seeds of each compared pair) or from numbers (``--sd``,
``--effect``, ``--family``). The test is the compare report's: paired t, two-sided, Holm over its family
(``grpolab.planning``)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from grpolab.errors import UserError
from grpolab.progress import print_frame, print_text

_UNITS = "in the scores' units (fractions: 0.05 is 5 points)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pilot", nargs="?", metavar="COMPARE_DIR", help="a finished grpolab compare folder")
    parser.add_argument("--effect", type=float, help=f"the difference to detect, {_UNITS} (default with a pilot: "
                                                     "each pair's observed difference)")
    parser.add_argument("--sd", type=float, help=f"the SD of one seed's paired difference, {_UNITS} (default "
                                                 "with a pilot: the pilot's)")
    parser.add_argument("--family", type=int, help="tests in the Holm family, without a pilot (default: 1; a "
                                                   "pilot's families are its report's)")
    parser.add_argument("--power", type=float, default=0.8, help="the power wanted (default: 0.8)")
    parser.add_argument("--alpha", type=float, default=0.05, help="the family's level (default: 0.05)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    if args.pilot is None:
        args.family = 1 if args.family is None else args.family
        return _from_numbers(args)
    if args.family is not None:
        raise UserError(f"--family applies without a pilot: with {args.pilot} each pair's Holm family is its "
                        "report's (the primary pair at every G, the other pairs); drop --family, or drop the folder "
                        "and give --sd and --effect")
    return _from_pilot(args)


def _none_detect(effect: float, sd: float) -> str:
    """Why no number of seeds is given for ``effect`` at ``sd``: an effect of 0, or one beyond ``MOST_SEEDS``."""
    from grpolab.planning.power import MOST_SEEDS

    if effect == 0:
        return "no number of seeds detects an effect of 0"
    return (f"more than {MOST_SEEDS:,} seeds per arm would be needed to detect a difference of {effect:g} (SD of the "
            f"paired difference {sd:g})")


def _from_numbers(args: argparse.Namespace) -> int:
    from grpolab.planning import floored_power, seeds_needed

    if args.sd is None or args.effect is None:
        raise UserError("without a pilot COMPARE_DIR, give --sd (of the paired difference) and --effect")
    seeds = seeds_needed(args.effect, args.sd, power=args.power, alpha=args.alpha, family=args.family)
    data = {"seeds": seeds, "effect": args.effect, "sd": args.sd, "family": args.family, "power": args.power,
            "alpha": args.alpha, "achieved_power": None if seeds is None else
            floored_power(args.effect, args.sd, seeds, alpha=args.alpha, family=args.family)}
    if args.json:
        print(json.dumps(data))
    elif seeds is None:
        print_text(_none_detect(args.effect, args.sd))
    else:
        print_text(f"{seeds} seeds per arm detect a difference of {args.effect:g} (SD of the paired difference "
                   f"{args.sd:g}) with power {data['achieved_power']:.3f} >= {args.power:g}: paired t, two-sided, "
                   f"alpha {args.alpha:g}, Holm over a family of {args.family}")
    return 0


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _from_pilot(args: argparse.Namespace) -> int:
    from grpolab.planning.pilot import ONE_SEED, pair_plans, read_pilot, variance_components

    results, config = read_pilot(args.pilot)
    arms = variance_components(results)
    if arms.empty:
        raise UserError(f"{args.pilot} holds no end evaluation of a run that did not diverge, so there is no score "
                        "to plan from; plan from numbers (--sd, --effect), or run a pilot whose runs finish")
    plans = pair_plans(results, config, effect=args.effect, power=args.power, alpha=args.alpha, sd=args.sd)
    notes = [ONE_SEED] if (arms["seeds"] < 2).any() and args.sd is None else []
    if not plans:
        notes.append("no compared pair: the report tests none (one arm per group size, or an arm without a "
                     "finished run), so there is nothing to plan seeds for; give --sd and --effect without the folder")
    if args.json:
        data = {"arms": [{k: _clean(v) for k, v in row.items()} for row in arms.to_dict(orient="records")],
                "pairs": [{k: _clean(v) for k, v in row.items()} for row in plans], "notes": notes,
                "power": args.power, "alpha": args.alpha}
        print(json.dumps(data))
        return 0
    _print_pilot(arms, plans, notes, args.power)
    return 0


def _print_pilot(arms: Any, plans: list[dict[str, Any]], notes: list[str], power: float) -> None:
    shown = arms.copy()
    for column in ("mean", "total", "sampling", "training_seed", "prompt"):
        shown[column] = shown[column].map(lambda v: "n/a" if not math.isfinite(v) else f"{v:.3g}")
    print_text("End-score variance per arm (training seed, evaluation sampling, prompt):")
    print_frame(shown)
    for note in notes:
        print_text(f"note: {note}")
    for plan in plans:
        label = f"G = {plan['group_size']}" + (f" ({plan['variant']})" if plan["variant"] else "")
        pair = f"{label}, {plan['role']}: {plan['name_a']} vs {plan['name_b']}"
        if not math.isfinite(plan["sd"]):
            print_text(f"{pair}: no plan: no SD of the paired difference ({plan['sd_source']}); rerun the pilot with "
                       "2 seeds or more, or pass --sd")
            continue
        needed = (_none_detect(plan["effect"], plan["sd"]) if plan["seeds"] is None else
                  f"{plan['seeds']} seeds per arm detect {plan['effect']:+.3g}")
        print_text(f"{pair}: {needed} at power {power:g} (SD {plan['sd']:.3g} from {plan['sd_source']}; "
                   f"Holm over {plan['family_size']}; {plan['seeds_now']} now)")
