"""End-to-end runs of the trainer on the embedded model with tiny budgets."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from grpolab import advantages
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.models import load_policy
from grpolab.train.trainer import Trainer
from resumed_runs import straight_and_resumed

TINY = dict(prompts_per_step=4, group_size=4, steps=2, eval_limit=8, eval_samples=2, checkpoint_every=0,
            progress=False, threads=1, lr=1e-3)


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> bool:
    after = dict(model.named_parameters())
    return any(not torch.equal(before[n], after[n].detach()) for n in before)


@pytest.mark.parametrize("estimator", advantages.available())
def test_two_steps_per_estimator(estimator: str, tmp_path) -> None:
    config = TrainConfig(advantage=estimator, **TINY)
    trainer = Trainer(config, tmp_path / "run")
    before = _snapshot(trainer.model)
    result = trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert all(np.isfinite(row["loss/total"]) for row in rows)
    assert {"starvation/degenerate", "starvation/d_iid", "rollout/reward_mean", "perf/step_time"} <= set(rows[0])
    assert [row["starvation/window_groups"] for row in rows] == [4, 8]  # D_iid's pbar pools both steps' groups
    trained = sum(row["loss/trained_sequences"] for row in rows)
    # weight decay 0: a step with no trained rows is an AdamW step on a zero gradient, which moves nothing
    # unless an earlier step left momentum, so the weights change exactly when some rows were trained
    assert _changed(before, trainer.model) == (trained > 0)
    table = pq.read_table(tmp_path / "run" / "rollouts" / "step-000001.parquet")
    assert table.num_rows == 16 and set(table.column("step").to_pylist()) == {1}
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
    assert [e["phase"] for e in result.evaluations] == ["start", "end"]


def test_sign_always_trains_every_completion(tmp_path) -> None:
    trainer = Trainer(TrainConfig(advantage="sign", **TINY), tmp_path / "run")
    before = _snapshot(trainer.model)
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(row["loss/trained_sequences"] == 16 for row in rows)
    assert all(row["starvation/useful_fraction"] == 1.0 for row in rows)
    assert all(row["starvation/degenerate"] == 0.0 for row in rows)  # no group has all advantages zero
    assert _changed(before, trainer.model)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path) -> None:
    config = TrainConfig(advantage="sign", **{**TINY, "steps": 4, "checkpoint_every": 2, "eval_start": False})
    straight, resumed, resumed_from = straight_and_resumed(config, tmp_path, crash_after=3)
    assert resumed_from == 2
    for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), name
    steps = [json.loads(line)["step"] for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert (resumed.completions_generated, resumed.spent) == (straight.completions_generated, straight.spent)
    assert sorted(p.name for p in (tmp_path / "killed" / "rollouts").iterdir()) == [
        f"step-{s:06d}.parquet" for s in (1, 2, 3, 4)]


def test_lora_trains_only_adapters_and_saves_them(tmp_path) -> None:
    config = TrainConfig(advantage="sign", lora=True, lora_r=4, lora_alpha=8, **TINY)
    trainer = Trainer(config, tmp_path / "run")
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    before = _snapshot(trainer.model)
    trainer.run()
    assert _changed(before, trainer.model)
    assert (tmp_path / "run" / "final" / "adapter_model.safetensors").is_file()
    policy = load_policy(str(tmp_path / "run"))  # base + adapter, merged
    assert sum(p.numel() for p in policy.model.parameters()) > 0


def test_local_directory_model_loads(tmp_path) -> None:
    policy = load_policy("embedded")
    policy.model.save_pretrained(tmp_path / "model", safe_serialization=True)
    policy.tokenizer.save_pretrained(tmp_path / "model")
    again = load_policy(str(tmp_path / "model"))
    for a, b in zip(policy.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_pickle_only_directory_is_refused(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(UserError, match="only safetensors"):
        load_policy(str(tmp_path))


def test_dynamic_sampling_counts_its_extra_completions(tmp_path) -> None:
    config = TrainConfig(advantage="dr_grpo", dynamic_sampling=True, dynamic_max_rounds=3, **TINY)
    Trainer(config, tmp_path / "run").run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        rounds = row["rollout/dynamic_rounds"]
        assert row["rollout/groups"] <= 4
        assert row["starvation/degenerate"] == 0.0  # the kept groups are never degenerate
        assert 0 <= rounds <= 3 and (row["rollout/groups"] == 4 or rounds == 3)  # full, or out of rounds
    assert rows[-1]["rollout/completions_generated"] == 16 * (2 + sum(r["rollout/dynamic_rounds"] for r in rows))


def test_group_masking_trains_only_the_informative_groups_and_logs_the_whole_batch(tmp_path) -> None:
    config = TrainConfig(advantage="sign", mask_degenerate_groups=True, **{**TINY, "steps": 3})
    Trainer(config, tmp_path / "run").run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        masked = row["loss/masked_groups"]
        assert row["rollout/groups"] == 4 and masked == round(row["starvation/uniform"] * 4)
        assert row["loss/trained_sequences"] == (4 - masked) * 4  # sign gives every completion an advantage
    assert any(row["loss/masked_groups"] > 0 for row in rows)  # the embedded model solves some groups whole


def test_a_completion_budget_ends_the_run_after_the_step_that_reaches_it(tmp_path) -> None:
    config = TrainConfig(advantage="sign", budget="completions=40", **{**TINY, "steps": 10})
    Trainer(config, tmp_path / "run").run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["rollout/completions_generated"] for row in rows] == [16, 32, 48]  # P x G = 16 a step
    evaluations = [json.loads(line) for line in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["step"]) for e in evaluations] == [("start", 0), ("end", 3)]
    assert [p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")] == ["step-000003"]
    tokens = [row["rollout/tokens_generated"] for row in rows]
    assert tokens == sorted(tokens) and tokens[0] > 0
    Trainer(config, tmp_path / "run", resume=True).run()  # its budget is spent: nothing more is sampled
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3


def test_a_token_budget_counts_every_sampled_token(tmp_path) -> None:
    config = TrainConfig(advantage="dr_grpo", dynamic_sampling=True, budget="tokens=200", **{**TINY, "steps": 10})
    Trainer(config, tmp_path / "run").run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["rollout/tokens_generated"] >= 200 and all(r["rollout/tokens_generated"] < 200 for r in rows[:-1])


def test_a_verifier_that_raises_is_counted_not_fatal(tmp_path, monkeypatch) -> None:
    calls = {"n": 0}

    def flaky(completion: str, reference: str) -> float:
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise RuntimeError("boom")
        return float(completion.strip() == reference.strip())

    config = TrainConfig(advantage="grpo", **{**TINY, "eval_start": False, "eval_samples": 0})
    trainer = Trainer(config, tmp_path / "run")
    trainer.verifier = flaky
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert sum(row["rollout/verifier_errors"] for row in rows) > 0
    assert all(np.isfinite(row["loss/total"]) for row in rows)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"advantage": "nope"}, "unknown advantage estimator 'nope'"),
        ({"model": "/does/not/exist"}, "not a directory"),
        ({"task": "gsm8k", "data": "/does/not/exist.jsonl"}, "/does/not/exist.jsonl"),
        ({"task": "nope"}, "unknown task"),
    ],
)
def test_config_errors_name_the_problem(changes: dict, message: str, tmp_path) -> None:
    with pytest.raises(ValueError, match=message):
        Trainer(TrainConfig(**{**TINY, **changes}), tmp_path / "run")


def test_group_size_one_is_refused_for_group_estimators(tmp_path) -> None:
    with pytest.raises(UserError, match="needs groups of G >= 2"):
        Trainer(TrainConfig(advantage="grpo", **{**TINY, "group_size": 1}), tmp_path / "run")


def test_existing_run_needs_resume(tmp_path) -> None:
    config = TrainConfig(advantage="sign", **{**TINY, "steps": 1, "eval_start": False, "eval_samples": 0})
    Trainer(config, tmp_path / "run").run()
    with pytest.raises(UserError, match="--resume"):
        Trainer(config, tmp_path / "run")


def test_gradient_analysis_is_logged_on_its_steps(tmp_path) -> None:
    config = TrainConfig(advantage="dr_grpo", grad_analysis_every=2, **{**TINY, "eval_start": False, "eval_samples": 0})
    Trainer(config, tmp_path / "run").run()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert not any(key.startswith("grad/") for key in rows[0])
    grad = {k: v for k, v in rows[1].items() if k.startswith("grad/")}
    assert grad and all(v is None or np.isfinite(v) for v in grad.values())
