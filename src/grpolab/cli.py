"""The ``grpolab`` command line: one subcommand per job, each in its own module.

Every subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``; this file only
dispatches and turns a usage error (``OneLineParser``), a ``UserError`` (bad input), an ``OSError`` (unwritable
path, full disk) or running out of memory (``MemoryError``, torch's ``OutOfMemoryError``, the CPU allocator's
``RuntimeError``) into a one-line message with exit code 2; the out-of-memory line names the command's settings
that size its batches.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import select
import signal
import sys
import warnings
from typing import NoReturn

from grpolab.errors import UserError

# subcommand -> (module, one-line help). Modules load lazily so that `grpolab --help` is fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("grpolab.commands.train", "train a policy with a GRPO-family estimator"),
    "compare": ("grpolab.commands.compare", "multi-seed comparison of estimators, with a report"),
    "eval": ("grpolab.commands.evaluate", "evaluate a model or run directory: accuracy and pass@k"),
    "preflight": ("grpolab.commands.preflight", "predict a task's gradient starvation before training; a G and band"),
    "plan": ("grpolab.commands.plan", "the seeds a comparison needs, from a pilot compare folder or from numbers"),
    "export": ("grpolab.commands.export", "write a run as a Hugging Face model folder with a model card"),
    "lm-eval-tasks": ("grpolab.commands.lm_eval_tasks", "write a task's test split as an lm-eval task YAML"),
    "audit": ("grpolab.commands.audit", "report the gradient starvation in existing rollout logs"),
    "gradients": ("grpolab.commands.gradients", "gradient spectrum (effective rank) of one rollout batch"),
    "estimators": ("grpolab.commands.estimators", "list the registered advantage estimators"),
    "mechanism": ("grpolab.commands.mechanism", "explain a comparison: format breakage, per-token shifts, pass@k"),
}


# command -> the settings that size what it holds in memory (named when it runs out)
MEMORY_SETTINGS: dict[str, str] = {
    "train": "--group-size, --prompts-per-step, --max-new-tokens, --micro-batch-size or --eval-samples",
    "compare": "--group-sizes, --prompts-per-step, --max-new-tokens, --micro-batch-size, --eval-samples or --workers",
    "eval": "--eval-samples, --max-new-tokens or --limit",
    "preflight": "--eval-samples, --max-new-tokens or --eval-limit",
    "gradients": "--group-size, --prompts-per-step, --max-new-tokens or --grad-analysis-sketch-dim",
    "mechanism": "--samples or --prompts (or --parts passk,updates, which sample nothing)",
    "audit": "the files audited at once (audit a folder's tables one by one)",
}
# How to go on after an interruption, a full disk or running out of memory, for the commands whose runs resume
# from their last checkpoint (a train --out that holds a checkpoint is refused without --resume); others rerun.
_RERUN = {"train": "rerun with --resume and the same --out to continue from the last checkpoint",
          "compare": "rerun with the same --out to resume (its runs go on from their last checkpoints)"}
_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is running out of memory: ``MemoryError``, torch's ``OutOfMemoryError``, or a
    ``RuntimeError`` of an allocator (``DefaultCPUAllocator: can't allocate memory``, ``... out of memory``)."""
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return True
    return isinstance(error, RuntimeError) and any(text in str(error).lower() for text in _OOM_TEXT)


def _out_of_memory_line(command: str, error: BaseException) -> str:
    found = re.search(r"tried to allocate (\d+) bytes|tried to allocate ([\d.]+ ?[KMGT]i?B)", str(error), re.I)
    size = ""
    if found:
        size = f" allocating {_size(int(found[1]))}" if found[1] else f" allocating {found[2]}"
    settings = MEMORY_SETTINGS.get(command, "the sizes of its batches")
    rerun = _RERUN.get(command, "rerun")
    if "cuda" in str(error).lower() or "gpu" in str(error).lower():  # torch.cuda.OutOfMemoryError's text
        return (f"grpolab {command}: error: ran out of GPU memory{size}; lower {settings} (or free the GPU, or give "
                f"each run its own GPU), then {rerun}")
    return f"grpolab {command}: error: ran out of memory{size}; lower {settings} (or free memory), then {rerun}"


def _size(count: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} B"


_LONG_WORD = 200  # characters of one word (a value given without spaces) echoed whole
_LONG_LINE = 4000  # characters of one message line echoed whole


def printable(message: str) -> str:
    """``message`` as one readable line, whatever values it echoes: control characters (a newline, an escape
    sequence that would move the cursor or recolour the terminal) written as escapes (``\\n``, ``\\x1b``), a
    word over 200 characters cut to its start, its length and its last 3 characters, and a line still over 4,000
    characters cut in the middle, keeping its end (the fix)."""
    text = "".join(char if char.isprintable() else repr(char)[1:-1] for char in message)
    text = re.sub(rf"\S{{{_LONG_WORD + 1},}}", lambda word: f"{word[0][:60]}[{len(word[0]) - 63:,} more characters]"
                  f"{word[0][-3:]}", text)
    if len(text) > _LONG_LINE:
        text = f"{text[:_LONG_LINE // 2]} ... ({len(text) - _LONG_LINE * 3 // 4:,} characters left out) ... " \
               f"{text[-_LONG_LINE // 4:]}"
    return text


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error (a bad flag value, an invalid choice, an unknown flag) in one line like every
    other error of grpolab: the usage of ``grpolab train``'s ~60 flags would bury the line that names the mistake,
    and ``--help`` shows it. The subcommands' parsers are of this class too."""

    command: str | None = None  # the subcommand on the command line, whose --help a usage error points to

    def error(self, message: str) -> NoReturn:
        prog = f"grpolab {self.command}" if self.prog == "grpolab" and self.command else self.prog
        self.exit(2, printable(f"{prog}: error: {message}{_trl_name_hint(message)} (see {prog} --help)") + "\n")


def _trl_name_hint(message: str) -> str:
    """For an unknown flag that is a TRL ``GRPOConfig`` name grpolab maps (``--num-generations``,
    ``--learning_rate``): '; --num-generations is TRL's name: grpolab's is --group-size'. '' otherwise."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    from grpolab.train.trl_engine.arguments import settings_for_trl_name

    hints = []
    for token in message.split(":", 1)[1].split():
        flag = token.split("=", 1)[0]
        settings = settings_for_trl_name(flag[2:]) if flag.startswith("--") else []
        if settings:
            ours = " or ".join("--" + name.replace("_", "-") for name in settings)
            hints.append(f"{flag} is TRL's GRPOConfig name: grpolab's is {ours}")
    return "; " + "; ".join(hints) + " (docs/integrations.md maps every setting)" if hints else ""


DESCRIPTION = ("Reinforcement learning from verifiable, binary rewards on language models with the GRPO family of "
               "advantage estimators, and the gradient starvation of their groups made visible.")
EPILOG = "'grpolab COMMAND --help' gives each command's settings; docs/guide.md walks through them."


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="grpolab", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action=_VersionAction,
                        help="show grpolab's version (and its checkout's commit, with the source digest where the "
                             "checkout has changes)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser.command = chosen if chosen in COMMANDS else None
    for name, (module_name, help_text) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the chosen command's module is imported
            importlib.import_module(module_name).add_arguments(sub)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: the version line, computed only when asked (it runs git on a checkout)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        print(f"grpolab {_version()}")  # stdout, as argparse's own version action
        parser.exit(0)


def _version() -> str:
    """grpolab's version, and the commit of the checkout it runs from where there is one, with the source digest
    where the commit does not name the code (``provenance.describe``)."""
    from grpolab.provenance import describe, software

    version, _, rest = describe(software()).partition(", ")
    return f"{version} ({rest})" if rest else version


def _one_line_warning(command: str):
    """``warnings.formatwarning`` for the command line: one line, no source line of grpolab's code."""

    def format_warning(message, category, filename, lineno, line=None) -> str:
        return printable(f"grpolab {command}: warning: {' '.join(str(message).split())}") + "\n"

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
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a closed stdout shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        return _end_on_closed_stdout()
    except UserError as error:
        print(printable(f"grpolab {args.command}: error: {error}"), file=sys.stderr)
        return 2
    except OSError as error:  # unwritable --out, full disk, ...: the environment, not a bug of grpolab
        from grpolab.io import os_error_advice

        reason, remedy = os_error_advice(error)
        where = f" ({error.filename})" if error.filename else ""
        print(printable(f"grpolab {args.command}: error: {reason}{where}; {remedy}, then "
                        f"{_RERUN.get(args.command, 'rerun')}"), file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:  # torch's OutOfMemoryError is a RuntimeError
        if not out_of_memory(error):
            raise
        print(_out_of_memory_line(args.command, error), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the exit into a traceback
        again = f"; {_RERUN[args.command]}" if args.command in _RERUN else ""
        print(f"grpolab {args.command}: interrupted{again}", file=sys.stderr)
        return 130


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (``grpolab audit | head`` after head exited)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no stdout file descriptor
        return False


def _end_on_closed_stdout() -> int:
    """Exit code 141 (128 + SIGPIPE, what a shell tool gives) and nothing said: the reader of the output chose to
    stop. stdout is pointed at /dev/null so that the interpreter's last flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 141


if __name__ == "__main__":
    sys.exit(main())
