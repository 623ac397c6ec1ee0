"""The start evaluation shared by a sweep's runs at one seed: correct, keyed on what it depends on."""

from __future__ import annotations

import json

import pytest

from grpolab.config import TrainConfig
from grpolab.train.lifecycle import start_evaluation_key
from grpolab.train.trainer import Trainer

TINY = dict(prompts_per_step=4, group_size=4, steps=1, eval_limit=8, eval_samples=2, checkpoint_every=0,
            progress=False, threads=1, lr=1e-3)


def _start_row(run_dir) -> dict:
    rows = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    return next(row for row in rows if row["phase"] == "start")


def test_shared_start_evaluation_equals_a_fresh_one(tmp_path) -> None:
    """Run A (sign, LoRA) writes the cache; run B (dr_grpo, other lr) computes its own start without the
    cache: the two start evaluations must be identical, which is what makes sharing valid."""
    cache = tmp_path / "start-evals"
    lora = dict(lora=True, lora_r=4, lora_alpha=8)
    Trainer(TrainConfig(advantage="sign", **TINY, **lora), tmp_path / "a", start_eval_cache=cache).run()
    Trainer(TrainConfig(advantage="dr_grpo", **{**TINY, "lr": 3e-4}, **lora), tmp_path / "b").run()
    assert _start_row(tmp_path / "a") == _start_row(tmp_path / "b")
    assert len(list(cache.glob("*.json"))) == 1


def test_a_cached_start_evaluation_is_read_back(tmp_path) -> None:
    """A planted cache entry is what the run reports: the second run reads, not recomputes."""
    config = TrainConfig(advantage="grpo", **TINY)
    cache = tmp_path / "start-evals"
    cache.mkdir()
    planted = {"greedy_accuracy": 0.123, "n": 2, "pass_at_k": {"1": 0.5}, "successes": [], "problem_ids": [],
               "families": [], "mean_length": 1.0, "split": "test", "greedy_unscorable": 0.0, "unscorable": 0.0}
    (cache / f"{start_evaluation_key(config)}.json").write_text(json.dumps(planted))
    Trainer(config, tmp_path / "run", start_eval_cache=cache).run()
    assert _start_row(tmp_path / "run")["greedy_accuracy"] == 0.123


def test_the_key_follows_what_the_start_evaluation_depends_on() -> None:
    base = TrainConfig(advantage="sign", lr=1e-4)
    assert start_evaluation_key(base) == start_evaluation_key(base.replace(advantage="grpo", lr=1e-3, group_size=2))
    for changed in (dict(seed=1), dict(eval_limit=7), dict(temperature=0.5), dict(model="embedded-arith"),
                    dict(task_options={"max_new_tokens": 5}), dict(eval_split="validation")):
        assert start_evaluation_key(base) != start_evaluation_key(base.replace(**changed)), changed


@pytest.mark.parametrize("damage", ["", "{\"greedy_acc", "[1, 2]", "{\"greedy_accuracy\": 0.5}", "\xff"])
def test_a_damaged_cache_entry_is_recomputed_with_a_warning(damage: str, tmp_path, monkeypatch) -> None:
    """An empty entry (what a power loss leaves of an unsynced write), a torn, foreign or partial one is taken
    as missing: one warning naming it, the start evaluation recomputed and the entry rewritten whole (fsynced);
    was: every run at that seed failed with a bare JSONDecodeError, forever."""
    import grpolab.train.lifecycle as lifecycle

    config = TrainConfig(advantage="grpo", **TINY)
    cache = tmp_path / "start-evals"
    cache.mkdir()
    entry = cache / f"{start_evaluation_key(config)}.json"
    entry.write_bytes(damage.encode("latin-1"))
    written = []
    real_write = lifecycle.atomic_write_text
    monkeypatch.setattr(lifecycle, "atomic_write_text", lambda path, text: (written.append(path),
                                                                             real_write(path, text)))
    with pytest.warns(UserWarning, match=r"start-evals/.*\.json is damaged .*; evaluating the start again"):
        Trainer(config, tmp_path / "a", start_eval_cache=cache).run()
    Trainer(config, tmp_path / "fresh").run()
    assert _start_row(tmp_path / "a") == _start_row(tmp_path / "fresh")
    assert [path for path in written if path.parent == cache] == [entry]
    assert json.loads(entry.read_text())["greedy_accuracy"] == _start_row(tmp_path / "a")["greedy_accuracy"]
    assert list(cache.iterdir()) == [entry]  # no temporary file left
