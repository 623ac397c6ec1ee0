"""The command line answers at once: building a subcommand's parser (what ``--help`` and a usage error need)
imports no torch, transformers or pandas. The time it takes is a benchmark row (benchmarks/bench_cli.py), not a
timed test."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpolab.cli import COMMANDS

HEAVY = ("torch", "transformers", "pandas", "scipy", "matplotlib")
LIGHT = [name for name in COMMANDS if name != "estimators"]  # its help lists the registry, whose modules need torch


@pytest.mark.parametrize("command", LIGHT)
def test_a_subcommands_parser_imports_nothing_heavy(command: str) -> None:
    code = (f"import sys; from grpolab.cli import build_parser; build_parser([{command!r}]).format_help(); "
            f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"grpolab {command} --help imports {done.stdout.strip()}"
