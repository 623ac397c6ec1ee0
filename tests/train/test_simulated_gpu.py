"""grpolab's own engine on a simulated GPU (``tests/simulated_gpu.py``): the CUDA code path of the sampler, the
update, the checkpoints, the evaluation and the gradient analysis runs on the CPU with tensors that refuse what
CUDA tensors refuse, so a missed host crossing or a host tensor mixed into the device's ops fails here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.engine.test_static_decode import _reordering_gap

from device_tensors import DeviceTensor, is_device_tensor
from grpolab.cli import main
from grpolab.config import TrainConfig
from grpolab.engine.rollout import encode_prompts, sample
from grpolab.engine.sampler_path import SamplerRecord
from grpolab.models import load_policy
from grpolab.train.trainer import Trainer
from simulated_gpu import on_simulated_gpu, simulated_gpu

SMALL = {"prompts_per_step": 4, "group_size": 4, "eval_limit": 4, "eval_samples": 2, "threads": 1,
         "progress": False, "lr": 1e-3}


def _train(run: Path, device: str, steps: int, *, resume: bool = False) -> Trainer:
    trainer = Trainer(TrainConfig(steps=steps, checkpoint_every=1, device=device, **SMALL), run, resume=resume)
    trainer.run()
    return trainer


def test_the_engine_trains_on_the_gpu_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It binds the GPU as the current device, and records how it sampled: the simulated GPU cannot capture a CUDA
    graph, so every rollout stepped eagerly, and summary.json and each step's metrics say so."""
    bound: list[torch.device] = []
    with simulated_gpu(monkeypatch):
        monkeypatch.setattr(torch.cuda, "set_device", bound.append)
        trainer = _train(tmp_path / "run", "cuda", 2)
    assert bound == [torch.device("cuda", 0)]
    assert on_simulated_gpu(trainer.model)
    moments = [value for state in trainer.optimizer.state.values() for key, value in state.items() if key != "step"]
    assert moments and all(is_device_tensor(m) for m in moments)  # the optimiser state lives on the GPU too
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["device"] == "cuda:0 (simulated GPU)"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss/grad_norm"] == r["loss/grad_norm"] for r in rows)
    assert summary["sampler"]["paths"] == {"lean static": 2} and summary["sampler"]["fallback"]
    assert all(r["perf/sampler_graph"] == 0 and r["perf/sampler_fell_back"] == 1 for r in rows)


@pytest.mark.parametrize(("first", "then"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_the_other_device(first: str, then: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    with simulated_gpu(monkeypatch):
        before = _train(run, first, 2)
        weights = {n: p.detach().cpu().clone() for n, p in before.params.items()}
        after = Trainer(TrainConfig(steps=3, checkpoint_every=1, device=then, **SMALL), run, resume=True)
        assert after.start_step == 2
        for name, param in after.params.items():  # the checkpoint's weights, now on the other device
            assert torch.equal(param.detach().cpu(), weights[name])
            assert is_device_tensor(param) == (then == "cuda")
            assert all(is_device_tensor(v) == (then == "cuda")
                       for k, v in after.optimizer.state[param].items() if k != "step")
        after.run()
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


@pytest.mark.parametrize("engine", ["lean", "hf"])
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_the_gpu_sampler_draws_the_tokens_the_cpu_draws(engine: str, temperature: float,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    policy = load_policy("embedded")
    ids, mask = encode_prompts(policy.tokenizer, ["abc", "hello", "xy", "grpolab"], use_chat_template=False)

    def draw(budget: int | None = None) -> object:
        extra = {} if budget is None else {"budget_bytes": budget}
        return sample(policy.model, policy.tokenizer, ids, mask, num_samples=3, max_new_tokens=12,
                      temperature=temperature, generator=torch.Generator().manual_seed(7), engine=engine,
                      dtype="float32", **extra)

    on_cpu = draw()
    # The GPU's path (the static step; one prompt a pass) sums in other orders than the CPU's: log-probs within the
    # reordering gap of the sums along the path (derived, tests/float_bounds.py), not the float32 default 1e-5.
    gap = _reordering_gap(policy.model, on_cpu, torch.float32)
    with simulated_gpu(monkeypatch):
        policy.model.to("cuda")
        on_gpu, chunked = draw(), draw(budget=1)  # chunked: one prompt per pass, the same draws
        policy.model.to("cpu")
    for got in (on_gpu, chunked):
        assert not is_device_tensor(got.completion_ids)  # the rollout comes back to the host
        assert torch.equal(got.completion_ids, on_cpu.completion_ids)
        assert got.texts == on_cpu.texts
        torch.testing.assert_close(got.logprobs, on_cpu.logprobs, atol=gap, rtol=0)


def test_eval_and_gradients_run_on_the_gpu(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    with simulated_gpu(monkeypatch):
        assert main(["eval", "--limit", "3", "--n", "2", "--device", "cuda", "--json"]) == 0
        evaluation = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert main(["gradients", "--prompts", "2", "--group-size", "2", "--device", "cuda", "--json"]) == 0
        gradients = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 <= evaluation["greedy_accuracy"] <= 1 and set(evaluation["pass_at_k"]) == {"1", "2"}
    assert gradients["metrics"]["grad/dim"] > 0


class _NoEos:
    """A tokenizer whose EOS never comes, so that every row samples to the token budget."""

    def __init__(self, tokenizer: object) -> None:
        self._tokenizer = tokenizer
        self.eos_token_id = -1

    def __getattr__(self, name: str) -> object:
        return getattr(self._tokenizer, name)


def test_the_gpu_sampler_reads_the_device_once_per_8_tokens_not_per_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No host round trip per token: over 40 decoding steps the loop asks the device whether every row has finished
    once per 8 steps, and copies the tokens, entropies and log-probs back once each."""
    policy = load_policy("embedded")
    ids, mask = encode_prompts(policy.tokenizer, ["abc", "hello", "xy", "grpolab"], use_chat_template=False)
    reads: list[str] = []
    forward = DeviceTensor.__dict__["__torch_function__"].__func__
    to_host = {torch.Tensor.__bool__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__int__,
               torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.cpu, torch.Tensor.numpy}

    def counting(cls, func, types, args=(), kwargs=None):  # every read of a device tensor from the host
        if func in to_host or (func is torch.Tensor.to and len(args) > 1 and str(args[1]).startswith("cpu")):
            reads.append(func.__name__)
        return forward(cls, func, types, args, kwargs)

    with simulated_gpu(monkeypatch):
        policy.model.to("cuda")
        monkeypatch.setattr(DeviceTensor, "__torch_function__", classmethod(counting))
        rollout = sample(policy.model, _NoEos(policy.tokenizer), ids, mask, num_samples=3, max_new_tokens=40,
                         generator=torch.Generator().manual_seed(0), dtype="float32")
    assert rollout.completion_ids.shape[1] == 40
    assert len(reads) <= 40 // 8 + 3, reads  # a per-token round trip would make it 40 or more


def test_a_bfloat16_run_trains_on_the_gpu_under_autocast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dtype bfloat16`` on the simulated GPU: the update runs under autocast (the CPU's, standing in for CUDA's),
    its matmuls in bfloat16, and the run finishes with finite losses."""
    casts: list[tuple[str, torch.dtype]] = []
    with simulated_gpu(monkeypatch):
        autocast = torch.autocast

        def recording(device_type: str, *args, **kwargs):
            casts.append((device_type, kwargs.get("dtype")))
            return autocast(device_type, *args, **kwargs)

        monkeypatch.setattr(torch, "autocast", recording)
        trainer = Trainer(TrainConfig(steps=2, checkpoint_every=0, device="cuda", dtype="bfloat16", **SMALL),
                          tmp_path / "run")
        trainer.run()
    assert ("cuda", torch.bfloat16) in casts
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["loss/total"]) and np.isfinite(r["loss/grad_norm"]) for r in rows)


def test_a_finished_run_resumed_again_keeps_its_sampler_record(tmp_path: Path) -> None:
    """`grpolab train --out RUN --resume` on a finished run trains nothing: summary.json keeps the rollouts its
    first start recorded instead of an empty record."""
    run = tmp_path / "run"
    _train(run, "cpu", 2)
    first = json.loads((run / "summary.json").read_text())["sampler"]
    assert first == {"paths": {"lean dynamic": 2}, "fallback": None}
    _train(run, "cpu", 2, resume=True)
    assert json.loads((run / "summary.json").read_text())["sampler"] == first


def test_an_extended_run_counts_the_rollouts_of_every_start(tmp_path: Path) -> None:
    """The record travels in each checkpoint: extended from 2 to 4 steps, summary.json counts 4 rollouts (was: the
    2 of the last start only, the first start's record dropped with its summary)."""
    run = tmp_path / "run"
    _train(run, "cpu", 2)
    _train(run, "cpu", 4, resume=True)
    assert json.loads((run / "summary.json").read_text())["sampler"] == {"paths": {"lean dynamic": 4},
                                                                          "fallback": None}


def test_a_checkpoint_without_a_record_counts_from_its_step() -> None:
    """A checkpoint saved before the record travelled in it: the summary says from which step it counts."""
    record = SamplerRecord()
    record.load_state(None, 3)
    assert record.summary() == {"paths": {}, "fallback": None, "from_step": 3}
    record.load_state({"paths": {"lean graph": 5}, "fallback": "", "from_step": 0}, 5)
    assert record.summary() == {"paths": {"lean graph": 5}, "fallback": None}
