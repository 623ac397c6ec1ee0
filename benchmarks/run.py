"""Run the benchmark suite and print one table.

    python benchmarks/run.py                 # everything (the full compare alone takes several minutes)
    python benchmarks/run.py --quick         # a reduced version of each (the SmolLM2 RL step dominates)
    python benchmarks/run.py --only trainer,rollout --json

Every benchmark is a module ``benchmarks/bench_NAME.py`` with ``run(quick: bool) -> list[dict]``; they
run one after another in this process. A benchmark that raises gives one row with ``met: false`` and
the error, and the others still run. ``--json`` prints the rows (``name``, ``ratio`` or ``value``,
``unit``, ``goal``, ``met``, ``detail``, extras); ``--markdown`` prints the table as Markdown.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, format_table, machine, markdown_table, row

BENCHMARKS = (
    "trainer",
    "engine",
    "rollout",
    "smollm2",
    "diagnostics",
    "verifiers",
    "spectrum",
    "per_sample_grads",
    "compare",
    "trl_engine",
    "rescore",
    "cli",
    "preflight",
    "sampler_reuse",
    "half_batch",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced version of every benchmark")
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--only", help=f"comma-separated benchmarks to run, from: {', '.join(BENCHMARKS)}")
    return parser.parse_args(argv)


def selected(only: str | None) -> list[str]:
    if not only:
        return list(BENCHMARKS)
    names = [name.strip().removeprefix("bench_") for name in only.split(",") if name.strip()]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return names


def run_one(name: str, quick: bool) -> list[Row]:
    """The rows of ``bench_NAME.run(quick)``, each tagged with its benchmark and wall time."""
    started = time.perf_counter()
    try:
        results = importlib.import_module(f"bench_{name}").run(quick)
    except ModuleNotFoundError as error:
        if error.name != f"bench_{name}":
            raise
        results = [row(name, unit="-", goal="-", met=None, detail=f"benchmarks/bench_{name}.py is missing")]
    except Exception as error:  # one broken benchmark must not hide the others' numbers
        traceback.print_exc(file=sys.stderr)
        results = [row(name, unit="-", goal="runs", met=False, detail=f"{type(error).__name__}: {error}"[:300])]
    seconds = round(time.perf_counter() - started, 1)
    return [{"benchmark": name, "bench_seconds": seconds, **result} for result in results]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    started = time.perf_counter()
    results: list[Row] = []
    for name in selected(args.only):
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        results += run_one(name, args.quick)
    total = time.perf_counter() - started
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    info = machine()
    print(
        f"grpolab benchmarks ({'quick' if args.quick else 'full'}), {total:.0f} s; nproc {info['nproc']}, "
        f"torch {info['torch']}, load {info['load_avg_1min']}"
    )
    print(markdown_table(results) if args.markdown else format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
