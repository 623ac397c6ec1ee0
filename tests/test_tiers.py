"""The test tiers: ``make test-fast`` runs the modules marked ``fast`` (the inner loop), ``make test`` runs every
tier but the soak. A fast module starts no process and sends no signal, the marker is registered, and the
Makefile's two targets select what their comments say."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PROCESS_MODULES = {"subprocess", "signal", "multiprocessing"}
CALLS = {"os.kill", "os.killpg", "os.fork", "ProcessPoolExecutor"}  # a thread pool is allowed

pytestmark = pytest.mark.fast


def _marked_fast(tree: ast.Module) -> bool:
    """Whether the module's ``pytestmark`` holds ``pytest.mark.fast``."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return "pytest.mark.fast" in ast.unparse(node.value)
    return False


def process_uses(source: str) -> list[str]:
    """What ``source`` uses to start a process or send a signal: imported modules and calls, as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROCESS_MODULES:
            found.append(node.module)
        elif isinstance(node, ast.ImportFrom):
            found += [a.name for a in node.names if a.name in CALLS]
        elif isinstance(node, ast.Attribute) and (ast.unparse(node) in CALLS or node.attr in CALLS):
            found.append(ast.unparse(node))
    return found


def fast_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if _marked_fast(ast.parse(p.read_text(encoding="utf-8"))))


def test_the_finder_sees_processes_and_kills() -> None:
    source = "import subprocess\nfrom multiprocessing import Process\nimport os\nos.kill(1, 9)\nimport json\n"
    assert process_uses(source) == ["subprocess", "multiprocessing", "os.kill"]
    assert process_uses("import concurrent.futures\nconcurrent.futures.ProcessPoolExecutor(2)\n") == [
        "concurrent.futures.ProcessPoolExecutor"]
    assert process_uses("from concurrent.futures import ProcessPoolExecutor\n") == ["ProcessPoolExecutor"]
    assert process_uses("import os\nimport concurrent.futures\nconcurrent.futures.ThreadPoolExecutor(2)\n") == []


def test_no_fast_module_starts_a_process_or_sends_a_signal() -> None:
    modules = fast_modules()
    assert len(modules) > 50  # the tier is the inner loop, not a handful of files
    uses = {str(p.relative_to(ROOT)): found for p in modules if (found := process_uses(p.read_text(encoding="utf-8")))}
    assert uses == {}


def test_the_fast_marker_is_registered() -> None:
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("fast:") for m in markers) and any(m.startswith("slow:") for m in markers)


def _recipe(target: str) -> str:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert match, f"the Makefile has no target {target}"
    return match.group(1)


def test_make_test_runs_every_tier_and_make_test_fast_only_the_fast_one() -> None:
    assert '-m "not slow"' in _recipe("test") and "fast" not in _recipe("test")
    assert '-m "fast and not slow"' in _recipe("test-fast")
    comment = (ROOT / "Makefile").read_text().split("test-fast:")[0].rsplit("\n\n", 1)[-1]
    assert re.search(r"\d{4}-\d{2}-\d{2}", comment), "the comment above test-fast dates its measured time"


def test_make_test_runs_two_pytest_processes_with_each_module_whole() -> None:
    """A module's fixtures (a compare run, a model load) are built once only when its tests share a process."""
    assert "-n 2 --dist loadfile" in _recipe("test")
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert any(requirement.startswith("pytest-xdist") for requirement in dev)
