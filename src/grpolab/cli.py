"""The ``grpolab`` command line: one subcommand per job, each in its own module.

Every subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``; this file only
dispatches and turns a ``UserError`` (bad input) or an ``OSError`` (unwritable path, full disk) into a
one-line message with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import warnings

from grpolab.errors import UserError

# subcommand -> (module, one-line help). Modules load lazily so that `grpolab --help` is fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("grpolab.commands.train", "train a policy with a GRPO-family estimator"),
    "compare": ("grpolab.commands.compare", "multi-seed comparison of estimators, with a report"),
    "eval": ("grpolab.commands.evaluate", "evaluate a model or run directory: accuracy and pass@k"),
    "audit": ("grpolab.commands.audit", "report the gradient starvation in existing rollout logs"),
    "gradients": ("grpolab.commands.gradients", "gradient spectrum (effective rank) of one rollout batch"),
    "estimators": ("grpolab.commands.estimators", "list the registered advantage estimators"),
    "mechanism": ("grpolab.commands.mechanism", "explain a comparison: format breakage, per-token shifts, pass@k"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpolab", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module_name).add_arguments(sub)
    return parser


def _one_line_warning(command: str):
    """``warnings.formatwarning`` for the command line: one line, no source line of grpolab's code."""

    def format_warning(message, category, filename, lineno, line=None) -> str:
        return f"grpolab {command}: warning: {' '.join(str(message).split())}\n"

    return format_warning


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    original_format = warnings.formatwarning
    warnings.formatwarning = _one_line_warning(args.command)
    try:
        return _run(module, args)
    finally:  # main() is also called in-process (tests, notebooks): leave the warnings module as it was
        warnings.formatwarning = original_format


def _run(module, args: argparse.Namespace) -> int:
    """The command's ``run(args)``, with bad input, environment errors and Ctrl-C turned into exit codes."""
    try:
        return int(module.run(args) or 0)
    except UserError as error:
        print(f"grpolab {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # unwritable --out, full disk, ...: the environment, not a bug of grpolab
        where = f" ({error.filename})" if error.filename else ""
        print(f"grpolab {args.command}: error: {error.strerror or error}{where}; check that the path is writable "
              "and the disk has space, then rerun (runs resume from their last checkpoint)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the exit into a traceback
        print(f"grpolab {args.command}: interrupted; rerun with the same --out to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
