"""The package's shape: an import graph without circles, no flat groups of files sharing a name prefix, and a
test directory that mirrors the packages.

Every import counts: module level, inside functions (lazy) and under ``if TYPE_CHECKING``, because each is a
dependency a reader has to follow. ``from package import name`` depends on ``package.name`` when that is a
module, else on the package.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = SOURCE / "grpolab"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imported(node: ast.AST, package: str, modules: dict[str, Path]) -> list[str]:
    """The grpolab modules one import statement depends on."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    found = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names]
    return [name for name in found if name in modules]


def import_graph() -> dict[str, set[str]]:
    """grpolab module -> the grpolab modules it imports (any import statement anywhere in the file)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {dep for node in ast.walk(tree) for dep in _imported(node, package, modules) if dep != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_lazy_and_package_imports() -> None:
    graph = import_graph()
    assert "grpolab.train.lifecycle" in graph["grpolab.train.trainer"]  # a module-level import
    assert "grpolab.train.step_advantages" in graph["grpolab.commands.gradients"]  # an import inside a function
    assert "grpolab.verifiers._pool" in graph["grpolab.verifiers.math_answer"]  # from package import module


def test_the_import_graph_has_no_circles() -> None:
    assert circles(import_graph()) == []


def _private_owner(module: str) -> str | None:
    """The package that owns ``module`` when a part of its name is private (``grpolab.verifiers._pool`` ->
    ``grpolab.verifiers``); None for a public module."""
    parts = module.split(".")
    private = [i for i, part in enumerate(parts) if part.startswith("_")]
    return ".".join(parts[: private[0]]) if private else None


def test_private_modules_are_imported_only_inside_their_package() -> None:
    graph = import_graph()
    leaks = sorted(f"{name} -> {dep}" for name, deps in graph.items() for dep in deps
                   if (owner := _private_owner(dep)) is not None and not (name + ".").startswith(owner + "."))
    assert leaks == []
    assert _private_owner("grpolab.verifiers._pool") == "grpolab.verifiers" and _private_owner("grpolab.stats") is None


def _name_prefix(stem: str) -> str:
    return stem.lstrip("_").split("_")[0]


@pytest.mark.parametrize("directory", sorted({p.parent for p in PACKAGE.rglob("*.py")}), ids=lambda p: str(p.name))
def test_no_flat_group_of_files_shares_a_name_prefix(directory: Path) -> None:
    """``x.py`` beside ``x_y.py``, or ``x_a.py`` beside ``x_b.py``, is a package waiting to be made."""
    stems = [p.stem for p in directory.glob("*.py") if p.stem != "__init__"]
    groups: dict[str, list[str]] = defaultdict(list)
    for stem in stems:
        groups[_name_prefix(stem)].append(stem)
    assert {prefix: names for prefix, names in groups.items() if len(names) > 1} == {}


def test_the_diagnostics_core_imports_nothing_but_itself() -> None:
    """``grpolab.diagnostics`` is the pure core: functions of arrays, usable without a model or a run. Besides
    itself it may use the error type and ``grpolab.devices``, the one crossing of a device tensor to the host."""
    graph = import_graph()
    allowed = {"grpolab.errors", "grpolab.devices"}
    outside = {dep for name, deps in graph.items() if name.startswith("grpolab.diagnostics") for dep in deps
               if not dep.startswith("grpolab.diagnostics") and dep not in allowed}
    assert outside == set()


def test_every_package_has_a_test_directory() -> None:
    """Tests mirror the packages: ``src/grpolab/<package>/`` is tested under ``tests/<package>/`` (the
    packages tested as a whole by one file name it ``tests/test_<package>.py``)."""
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    tests = ROOT / "tests"
    missing = [name for name in packages
               if not (tests / name).is_dir() and not (tests / f"test_{name}.py").is_file()]
    assert missing == []


def test_every_top_level_module_has_a_test_file() -> None:
    tests = ROOT / "tests"
    # exercised by every command's tests, not on their own; __main__ by tests/commands/test_module_entry.py
    untested = {"cli", "errors", "progress", "__main__"}
    modules = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__" and p.stem not in untested]
    assert [m for m in modules if not (tests / f"test_{m}.py").is_file()] == []


def test_prefix_groups_are_detected() -> None:
    assert _name_prefix("verl_plugin") == _name_prefix("verl") == "verl"
    assert _name_prefix("_mv_pool") == _name_prefix("_mv_worker")
    assert _name_prefix("training_state") == _name_prefix("training_step")


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules ``start`` depends on, directly or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


_ENGINES = ("grpolab.train.trainer", "grpolab.train.trl_engine")


def test_both_engines_run_in_one_shell_that_sits_below_them() -> None:
    """The run shell is one module that both engines import; it, and everything it uses, imports neither engine
    nor the dispatch; the own engine never imports TRL's; no module imports both: the dispatch starts each through
    the run class its object in the engine registry names."""
    from grpolab.capabilities import ENGINES

    graph = import_graph()
    assert "grpolab.train.shell" in graph["grpolab.train.trainer"]
    assert "grpolab.train.shell" in graph["grpolab.train.trl_engine.run"]
    assert "grpolab.train.shell" in graph["grpolab.train.trl_engine.recorder"]
    below = _reach(graph, "grpolab.train.shell")
    assert [m for m in below if m.startswith(_ENGINES) or m == "grpolab.train.engines"] == []
    assert [m for m in _reach(graph, "grpolab.train.trainer") if m.startswith("grpolab.train.trl_engine")] == []
    both = sorted(name for name, deps in graph.items()
                  if all(any(dep.startswith(engine) for dep in deps) for engine in _ENGINES))
    assert both == []
    homes = sorted(row.run_class.partition(":")[0] for row in ENGINES.values())
    assert homes == ["grpolab.train.trainer", "grpolab.train.trl_engine.run"]


# The only modules that may compare an engine's name: the dispatch and the engines' own code. Everything else asks
# the engine's object (``grpolab.capabilities.engine(name)``).
_ENGINE_NAME_HOMES = ("grpolab.train.engines", "grpolab.train.trl_engine", "grpolab.train.trainer",
                      "grpolab.train.checkpoint")
# Comparisons with a string that happens to be an engine's name but names something else, as written.
_NOT_ENGINE_NAMES = {
    "grpolab.cli": {"self.prog == 'grpolab'"},  # the program's name
    # the kind of rollout files the audit reads: a grpolab run's (either engine's) or TRL's own output directory
    "grpolab.audit.sources": {"kind == 'grpolab'", "source.kind == 'trl'", "source.kind != 'trl'"},
    "grpolab.audit.aggregate": {"source.kind == 'trl'", "info['kind'] == 'grpolab'",
                                "info['kind'] in ('trl', 'grpolab')"},
}


def _is_engine_name(node: ast.AST, names: Collection[str]) -> bool:
    """Whether ``node`` is an engine's name written out, or a tuple, list or set that holds one."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_engine_name(element, names) for element in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names


def _engine_name_comparisons(source: str, names: Collection[str]) -> list[str]:
    """The comparisons (``==``, ``!=``, ``in``, ``is``, a ``match`` case) in ``source`` with an engine's name
    written out, as written."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_is_engine_name(o, names) for o in (node.left, *node.comparators)):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Match):
            found += [f"match {ast.unparse(node.subject)}: case {ast.unparse(case.pattern)}" for case in node.cases
                      if any(_is_engine_name(p.value, names) for p in ast.walk(case.pattern)
                             if isinstance(p, ast.MatchValue))]
    return found


def test_the_engine_name_finder_finds_every_form_of_comparison() -> None:
    source = """
if base.engine != "trl":
    pass
x = name == "grpolab"
y = "trl" in engines or kind in ("x", "trl") or engine is "trl"
z = engine == "verl" or engine in {"a"} or {"trl": 1}[engine]
match config.engine:
    case "trl":
        pass
    case "other" | "grpolab":
        pass
    case _:
        pass
"""
    assert sorted(_engine_name_comparisons(source, ("grpolab", "trl"))) == sorted([
        "base.engine != 'trl'", "name == 'grpolab'", "'trl' in engines", "kind in ('x', 'trl')", "engine is 'trl'",
        "match config.engine: case 'trl'", "match config.engine: case 'other' | 'grpolab'"])


def test_no_module_but_the_dispatch_and_the_engines_compares_an_engine_name() -> None:
    """What an engine supports, how it names its checkpoints and how it starts are its object in
    ``grpolab.capabilities``; other modules ask it. A comparison with a string that is not an engine's name there
    (the program's name, the audit's file kinds) is listed, as written, in ``_NOT_ENGINE_NAMES``."""
    from grpolab.capabilities import ENGINES

    found = {}
    for name, path in sorted(_modules().items()):
        if (name + ".").startswith(tuple(home + "." for home in _ENGINE_NAME_HOMES)):
            continue
        hits = set(_engine_name_comparisons(path.read_text(encoding="utf-8"), ENGINES))
        if hits - _NOT_ENGINE_NAMES.get(name, set()):
            found[name] = sorted(hits - _NOT_ENGINE_NAMES.get(name, set()))
    assert found == {}


def test_every_listed_exception_is_still_written() -> None:
    """An exception whose comparison has gone is removed from ``_NOT_ENGINE_NAMES``, so the list cannot hide one."""
    from grpolab.capabilities import ENGINES

    modules = _modules()
    stale = {name: sorted(listed - set(_engine_name_comparisons(modules[name].read_text(encoding="utf-8"), ENGINES)))
             for name, listed in _NOT_ENGINE_NAMES.items()}
    assert {name: gone for name, gone in stale.items() if gone} == {}
