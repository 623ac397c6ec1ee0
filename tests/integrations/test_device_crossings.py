"""The adapters on an accelerator, simulated on the CPU: what TRL, its accelerator and verl hand grpolab are
``DeviceTensor``s (tests/device_tensors.py), which refuse ``numpy`` and mixing with CPU tensors as CUDA tensors
do, so that a tensor reaching numpy without crossing to the host (``grpolab.devices.to_host``) fails here and
not first on a GPU.

TRL's model stays on the CPU: its generation and loss see plain tensors; only what grpolab's subclasses get from
TRL (``_generate_and_score_completions``, ``_calculate_rewards``, ``accelerator.gather``) is "on the device",
and the output goes back to TRL's loss plain again (``off_device``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from device_tensors import is_device_tensor, off_device, on_device, simulated_cuda
from grpolab import diagnostics
from grpolab.integrations.verl import estimators as verl_estimators
from grpolab.integrations.verl.metrics import starvation_metrics as verl_starvation_metrics
from verl_batches import RAGGED_SIZES, make_batch

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def _plain(value: Any) -> bool:
    return type(value) is torch.Tensor


def _trl_on_device(monkeypatch: pytest.MonkeyPatch, outermost: type) -> list[Any]:
    """Make TRL hand ``outermost`` (a grpolab subclass of ``trl.GRPOTrainer``) and its parents DeviceTensors, run
    it under ``simulated_cuda`` and give TRL's CPU code (its reward bookkeeping, its loss) plain tensors again;
    return the outputs ``outermost`` produced."""
    import accelerate
    import trl

    from grpolab.integrations.trl import GRPOTrainer

    parent_generate = trl.GRPOTrainer._generate_and_score_completions
    parent_rewards = trl.GRPOTrainer._calculate_rewards
    gather, ours = accelerate.Accelerator.gather, outermost._generate_and_score_completions
    our_rewards = GRPOTrainer._calculate_rewards
    outputs: list[Any] = []

    def device_gather(self: Any, tensor: Any) -> Any:  # a gather keeps its input's device
        moved = any(is_device_tensor(t) for t in (tensor if isinstance(tensor, list | tuple) else [tensor]))
        result = gather(self, off_device(tensor))
        return on_device(result) if moved else result

    def generate(self: Any, inputs: Any) -> Any:
        with simulated_cuda():
            output = ours(self, inputs)
        outputs.append(output)
        return off_device(output)

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions",
                        lambda self, inputs: on_device(parent_generate(self, inputs)))
    monkeypatch.setattr(trl.GRPOTrainer, "_calculate_rewards",
                        lambda self, *args: on_device(parent_rewards(self, *args)))
    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards",  # grpolab keeps them on the device, TRL's CPU code not
                        lambda self, *args: off_device(our_rewards(self, *args)))
    monkeypatch.setattr(accelerate.Accelerator, "gather", device_gather)
    monkeypatch.setattr(outermost, "_generate_and_score_completions", generate)
    return outputs


def test_trl_subclass_crosses_to_the_host_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trl")
    from grpolab.integrations.trl import GRPOTrainer
    from integrations.test_trl import _example_module, _trainer

    model = str(_example_module().build_tiny_model(tmp_path / "tiny"))
    outputs = _trl_on_device(monkeypatch, GRPOTrainer)
    trainer = _trainer(model, str(tmp_path / "out"), "grpo", max_steps=1, log_completions=True)
    trainer.train()
    assert len(outputs) == 1
    assert is_device_tensor(outputs[0]["advantages"])  # what TRL's loss gets stays on the device
    groups = trainer.last_groups
    assert all(_plain(t) for t in (groups.rewards, groups.advantages, groups.lengths))  # logs: on the host
    assert groups.lengths.shape == groups.rewards.shape == (2, 4) and groups.lengths.sum() > 0
    assert set(groups.starvation) >= {f"starvation/{key}" for key in diagnostics.STARVATION_KEYS}
    assert "starvation/useful_token_fraction" in groups.starvation
    logged = list(trainer._logs["advantages"])
    assert logged == pytest.approx(groups.advantages.reshape(-1).tolist())


def test_trl_engine_records_a_step_trained_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trl")
    from grpolab.config import TrainConfig
    from grpolab.train import train
    from grpolab.train.runlog import read_metrics
    from grpolab.train.trl_engine.recorder import RecordingGRPOTrainer

    outputs = _trl_on_device(monkeypatch, RecordingGRPOTrainer)
    config = TrainConfig(engine="trl", steps=1, prompts_per_step=2, group_size=2, eval_limit=2, eval_samples=1,
                         max_new_tokens=8, checkpoint_every=0, progress=False, threads=1, eval_start=False)
    train(config, tmp_path / "run")
    assert len(outputs) == 1 and is_device_tensor(outputs[0]["completion_ids"])
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1]
    assert {"rollout/reward_mean", "rollout/truncated", "starvation/degenerate"} <= set(rows[0])
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "run" / "rollouts" / "step-000001.parquet")
    assert len(frame) == 4 and (frame["length"] > 0).all()


def test_run_recorder_reads_tensors_on_any_device(tmp_path: Path) -> None:
    """The recorder alone, handed a trainer whose newest batch is still on the device."""
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from grpolab.config import TrainConfig
    from grpolab.integrations.trl import GroupedBatch
    from grpolab.train.runlog import MetricsLog, RolloutLog, read_metrics
    from grpolab.train.shell import RunShell
    from grpolab.train.trl_engine.recorder import RolloutRecord, RunRecorder

    rewards = torch.tensor([[1.0, 0.0], [float("nan"), 1.0]])
    groups = on_device(GroupedBatch(rewards, torch.tensor([[0.5, -0.5], [0.0, 0.0]]), torch.tensor([[3, 4], [5, 6]]),
                                    {"starvation/uniform": 0.5}).__dict__)
    record = RolloutRecord(["a", "a", "b", "b"], ["x", "y", "z", "w"], [False, True, False, False], 0.1)
    shell = RunShell(TrainConfig(steps=1), tmp_path, command="test")
    shell.metrics_log, shell.rollout_log = MetricsLog(tmp_path / "metrics.jsonl"), RolloutLog(tmp_path / "rollouts")
    recorder = RunRecorder(iterations=1, steps=1, shell=shell, evaluate=lambda step: None, on_step=None)
    recorder.trainer = SimpleNamespace(last_groups=GroupedBatch(**groups), last_record=record)
    with simulated_cuda():
        recorder.on_log(SimpleNamespace(), SimpleNamespace(global_step=1), SimpleNamespace(), logs={"loss": 0.25})
    recorder.drain()
    shell.release()
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert row["rollout/reward_mean"] == pytest.approx(2 / 3) and row["rollout/completion_length"] == 4.5
    assert row["rollout/unscorable"] == 1.0 and row["loss/total"] == 0.25


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "sign", "passk"])
@pytest.mark.parametrize("conventions", ["verl", "grpolab"])
def test_verl_estimators_take_and_give_tensors_on_the_device(name: str, conventions: str) -> None:
    batch = make_batch((4, 4, 3, 2, 4), seed=1)  # groups of >= 2, so that every estimator and convention applies
    expected = verl_estimators.make_adv_estimator(name, conventions=conventions)(**batch)[0]  # plain CPU
    estimator = verl_estimators.make_adv_estimator(name, conventions=conventions)
    with simulated_cuda():
        advantages, returns = estimator(**on_device(batch), config={"norm_adv_by_std_in_grpo": True})
    assert is_device_tensor(advantages) and is_device_tensor(returns)  # back on verl's device
    torch.testing.assert_close(off_device(advantages), expected)


def test_verl_starvation_metrics_of_a_batch_on_the_device() -> None:
    batch = make_batch(RAGGED_SIZES, seed=3)
    data = {"token_level_rewards": batch["token_level_rewards"], "response_mask": batch["response_mask"],
            "uid": batch["index"], "advantages": batch["token_level_rewards"].sum(-1, keepdim=True) * 2 - 1}
    data["advantages"] = data["advantages"] * data["response_mask"]
    expected = verl_starvation_metrics(data)
    with simulated_cuda():
        got = verl_starvation_metrics(on_device(data), window=diagnostics.SuccessWindow())
    assert got == pytest.approx(expected, nan_ok=True)


def test_diagnostics_accept_tensors_on_the_device() -> None:
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    advantages, lengths = torch.tensor([[0.5, -0.5], [0.0, 0.0]]), torch.tensor([[2, 6], [3, 3]])
    expected = diagnostics.starvation_metrics(rewards.numpy(), advantages.numpy(), lengths=lengths.numpy())
    with simulated_cuda():
        got = diagnostics.starvation_metrics(*on_device([rewards, advantages]), lengths=on_device(lengths))
    assert got == expected and got["starvation/useful_token_fraction"] == 8 / 14
    assert np.array_equal(diagnostics.success_rates(on_device(rewards)), [0.5, 1.0])
