"""The table of metric keys (``grpolab.metric_keys``) against what both engines write on a 2-step run of the
embedded default, against the keys the source names, and against ``docs/metrics.md``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from grpolab.metric_keys import (
    ALWAYS,
    ENGINES,
    KEYS,
    RENAMED,
    default_keys,
    known,
    lookup,
    render_markdown,
    trl_names,
    unknown_keys,
    upgrade_row,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(steps=2, prompts_per_step=2, group_size=2, eval_limit=4, eval_samples=2, max_new_tokens=12,
            checkpoint_every=0, progress=False, threads=1, lr=1e-3)


def test_every_row_is_complete() -> None:
    names = [k.name for k in KEYS]
    assert len(names) == len(set(names))
    for k in KEYS:
        assert k.unit and k.meaning, k.name
        assert k.engines and set(k.engines) <= set(ENGINES), k.name
        assert bool(k.reason) == (set(k.engines) != set(ENGINES)), f"{k.name}: a reason iff one engine writes it"
        assert not k.trl or "trl" in k.engines, k.name
    assert set(RENAMED).isdisjoint(names) and all(new in names for new in RENAMED.values())


def test_lookup_prefers_the_exact_row_and_knows_families() -> None:
    assert lookup("rollout/entropy").name == "rollout/entropy"
    assert lookup("grad/effective_rank").name == "grad/*" and lookup("sampled/d_iid").name == "sampled/*"
    assert not known("rollout/nonsense") and not known("loss/policy")
    assert unknown_keys(["loss/entropy", "rollout/entropy", "trl/loss", "made/up"], "trl") == \
        ["made/up", "rollout/entropy"]


def test_old_rows_read_under_todays_names() -> None:
    assert upgrade_row({"step": 1, "loss/policy": 0.5}) == {"step": 1, "loss/total": 0.5}
    old_trl = {"step": 1, "rollout/entropy": 0.7, "trl/entropy": 0.7, "loss/total": 0.1}
    assert upgrade_row(old_trl) == {"step": 1, "loss/entropy": 0.7, "trl/entropy": 0.7, "loss/total": 0.1}
    own = {"step": 1, "rollout/entropy": 0.7, "loss/total": 0.1}
    assert upgrade_row(own) is own  # grpolab-engine rows keep their sampling entropy


def test_read_metrics_upgrades_an_old_log(tmp_path: Path) -> None:
    from grpolab.train.runlog import read_metrics

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss/policy": 0.25, "rollout/entropy": 1.0}\n')
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "loss/total": 0.25, "rollout/entropy": 1.0}]


def test_the_trl_mapping_comes_from_the_table() -> None:
    from grpolab.train.trl_engine import recorder

    assert recorder._TRL_NAMES == trl_names()
    assert trl_names()["entropy"] == "loss/entropy" and trl_names()["loss"] == "loss/total"


def test_docs_metrics_md_holds_the_table() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert render_markdown() in text, "docs/metrics.md is stale: paste grpolab.metric_keys.render_markdown()"


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


PREFIXES = ("rollout/", "loss/", "perf/", "starvation/", "sampled/", "grad/", "compute/")


@pytest.mark.parametrize("package", ["train", "report", "audit", "mechanism", "commands"])
def test_every_metric_key_the_source_names_is_in_the_table(package: str) -> None:
    """A hand-kept list of keys (a report's labels, a reader's columns) cannot name a key the table lacks."""
    named = {value for path in (ROOT / "src" / "grpolab" / package).rglob("*.py") for value in _string_constants(path)
             if value.startswith(PREFIXES) and " " not in value and "{" not in value and not value.endswith("/")}
    assert sorted(key for key in named if not known(key) and key not in RENAMED) == []


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """engine -> the keys its rows of a 2-step run of the embedded default hold."""
    pytest.importorskip("trl")
    from grpolab.config import TrainConfig
    from grpolab.train import train
    from grpolab.train.runlog import read_metrics

    keys = {}
    for engine in ENGINES:
        run_dir = tmp_path_factory.mktemp(engine) / "run"
        train(TrainConfig(**TINY, engine=engine), run_dir)
        rows = read_metrics(run_dir / "metrics.jsonl")
        assert [row["step"] for row in rows] == [1, 2]
        keys[engine] = set().union(*rows)
    return keys


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_writes_what_the_table_gives_it(written: dict[str, set[str]], engine: str) -> None:
    assert unknown_keys(written[engine], engine) == [], "add the key to grpolab.metric_keys.KEYS"
    assert sorted(set(default_keys(engine)) - written[engine]) == [], f"the table says {engine} writes these"


def test_the_engines_differ_only_where_the_table_says(written: dict[str, set[str]]) -> None:
    for one, other in (("grpolab", "trl"), ("trl", "grpolab")):
        for key in sorted(written[one] - written[other]):
            row = lookup(key)
            assert row is not None and row.engines.get(other, "never") != ALWAYS, f"only {one} wrote {key}"


DOC_KEY = re.compile(r"`((?:rollout|loss|perf|starvation|sampled|grad|compute)/[A-Za-z0-9_*]+)`")


def test_every_metric_key_the_docs_name_is_in_the_table() -> None:
    """A key in the docs (docs/losses.md's table of option metrics, the integration notes, ...) is one the table
    knows (a renamed key is named only in docs/metrics.md); ``prefix/*`` stands for the table's keys under it."""
    prefixes = {k.name.split("/")[0] + "/*" for k in KEYS}
    stale = set()
    for path in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]:
        for key in DOC_KEY.findall(path.read_text(encoding="utf-8")):
            if not (known(key) or key in prefixes or (key in RENAMED and path.name == "metrics.md")):
                stale.add(f"{path.name}: {key}")
    assert sorted(stale) == []
