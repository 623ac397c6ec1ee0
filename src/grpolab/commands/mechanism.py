"""``grpolab mechanism OUT``: explain a comparison's result from its runs: format breakage, per-token
log-prob changes on format vs content tokens (correct vs wrong completions), pass@k before/after, and the
update's geometry (successive and cross-seed update cosines, update norms, Adam's m/sqrt(v) against its
noise floor) from the runs' checkpoints.

Reads the reported runs of a ``grpolab compare`` output (``OUT/results.parquet``, ``OUT/runs/*``: each
run's ``eval.jsonl``, final model and checkpoints) and writes mechanism.csv, mechanism_runs.csv, mechanism.md and
mechanism.png into ``--out`` (default: OUT, or OUT/mechanism/VARIANT with ``--variant``). A comparison with
``--vary`` axes is analysed one variant at a time. See ``grpolab.mechanism`` for what is measured.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from grpolab.errors import UserError
from grpolab.io import check_output_folder
from grpolab.progress import progress_bar
from grpolab.progress import results_console as console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("compare_dir", metavar="OUT", help="the --out directory of a finished grpolab compare")
    parser.add_argument("--out", help="where to write mechanism.{csv,md,png} (default: OUT)")
    parser.add_argument("--prompts", type=int, default=64, help="test prompts to draw completions for (default 64)")
    parser.add_argument("--samples", type=int, default=4,
                        help="completions per prompt drawn from the start policy (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of the fixed completions (default 0)")
    parser.add_argument("--device", default="auto", help="where the models sample and score: auto (the first CUDA "
                                                         "GPU torch sees, else the CPU), cpu, cuda or cuda:N")
    parser.add_argument("--no-end-samples", action="store_true",
                        help="skip sampling each run's final model (its answer-format rates are then not measured)")
    parser.add_argument("--parts", default="format,tokens,passk,updates",
                        help="comma-separated parts to measure, of format, tokens, passk, updates (default: all); "
                             "format and tokens load and sample every run's model, passk and updates read files")
    parser.add_argument("--variant", help="of a comparison run with --vary, the variant to analyse, as its "
                                          "results list it (e.g. mask_truncated_completions=true)")
    parser.add_argument("--trust-run-code", action="store_true",
                        help="import the task or verifier that the runs' config.yaml names by dotted path "
                             "(pkg.module:function); only for run directories you trust")


def run(args: argparse.Namespace) -> int:
    from grpolab.config.checks import check_seed
    from grpolab.devices import resolve as resolve_device
    from grpolab.mechanism import Options, measure_runs, passk_reading, summarise
    from grpolab.mechanism.analysis import parse_parts, runs_to_analyse
    from grpolab.mechanism.render import terminal_table, update_lines, write_outputs

    if args.prompts < 1 or args.samples < 1:
        raise UserError(f"--prompts and --samples must be >= 1, got {args.prompts} and {args.samples}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    check_seed(args.seed)
    compare_dir = Path(args.compare_dir)
    options = Options(prompts=args.prompts, samples=args.samples, seed=args.seed, device=args.device,
                      end_samples=not args.no_end_samples, parts=parse_parts(args.parts),
                      trust_run_code=args.trust_run_code, variant=args.variant)
    # fails before any model loads, on a wrong device, a wrong directory, a missing variant, untrusted code or an
    # --out that cannot be written
    resolve_device(args.device)
    runs = runs_to_analyse(compare_dir, need_final=options.sampled, trust_run_code=args.trust_run_code,
                           variant=args.variant)
    out = check_output_folder(Path(args.out) if args.out else _default_out(compare_dir, args.variant))
    total = (len(runs) + 1 if options.sampled else 0) + ("updates" in options.parts)
    with progress_bar(True) as bar:
        task_id = bar.add_task("mechanism", total=total, info="measuring") if bar else None

        def on_progress(label: str) -> None:
            if bar is not None:
                bar.update(task_id, advance=1, info=f"done: {label}")

        per_run, facts = measure_runs(compare_dir, options, on_progress)
    summary = summarise(per_run)
    paths = write_outputs(out, per_run, summary, {**facts, "out": str(compare_dir)})
    if "tokens" in options.parts or "passk" in options.parts:
        console.print(terminal_table(summary))
    if "passk" in options.parts:
        for estimator, size in summary[["estimator", "group_size"]].drop_duplicates().itertuples(index=False):
            console.print(f"{estimator} G={size}: {passk_reading(summary, estimator, int(size))}")
    if options.sampled:
        console.print(f"fixed completions: {facts['correct']} correct, {facts['wrong']} wrong, "
                      f"from {facts['model']}")
    for line in [*update_lines(summary), *facts["update_notes"]]:
        console.print(line)
    console.print("written: " + ", ".join(str(p) for p in paths))
    return 0


def _default_out(compare_dir: Path, variant: str | None) -> Path:
    """OUT, or OUT/mechanism/VARIANT (with characters a folder name cannot hold replaced) for one variant."""
    if not variant:
        return compare_dir
    return compare_dir / "mechanism" / re.sub(r"[^A-Za-z0-9_.,=+-]", "_", variant)

