"""Several runs on one GPU (``--runs-per-gpu K``) under simulated GPUs (no GPU here): each GPU named by K workers, the
workers' default, Ray's fractional ``num_gpus``, the refusals, the memory check's arithmetic against a hand
computation, and each run's 1/K share of the sampler's budget, handed to the worker processes."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

import grpolab.sweep.local as local
from grpolab import capabilities
from grpolab.cli import main
from grpolab.config import CompareConfig, TrainConfig
from grpolab.engine import memory
from grpolab.errors import UserError
from grpolab.sweep import devices, sharing
from grpolab.sweep.devices import check_runs_per_gpu, gpus_each, worker_devices
from grpolab.sweep.local import worker_pool
from grpolab.sweep.plan import RunSpec
from grpolab.sweep.run import run_sweep
from sweep_runs import runs_per_gpu_in_worker

GIB = 1 << 30


def _machine(monkeypatch: pytest.MonkeyPatch, gpus: int, cuda_visible_devices: str | None = None) -> None:
    """Pretend torch sees ``gpus`` GPUs, in a process started with ``cuda_visible_devices`` (None: unset)."""
    monkeypatch.setattr(devices, "cuda_device_count", lambda: gpus)
    if cuda_visible_devices is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cuda_visible_devices)


# ---------------------------------------------------------------------------- slots


@pytest.mark.parametrize(("gpus", "env", "gpus_per_run", "runs_per_gpu", "workers", "expected"), [
    (2, None, None, 3, None, ["0", "1", "0", "1", "0", "1"]),  # 2 GPUs x K = 3: six slots, workers default to them
    (2, None, 1, 3, None, ["0", "1", "0", "1", "0", "1"]),
    (2, None, None, 3, 4, ["0", "1", "0", "1"]),  # fewer workers than slots still spread over both GPUs
    (1, None, None, 4, None, ["0"] * 4),
    (2, "4,5", None, 2, None, ["4", "5", "4", "5"]),  # the ids this process sees
    (4, None, None, 1, None, ["0", "1", "2", "3"]),  # K = 1: one worker per GPU, as before
])
def test_each_gpu_is_named_by_k_workers(monkeypatch: pytest.MonkeyPatch, gpus: int, env: str | None,
                                        gpus_per_run: int | None, runs_per_gpu: int, workers: int | None,
                                        expected: list[str]) -> None:
    _machine(monkeypatch, gpus, env)
    slots = worker_devices(gpus_per_run, workers, runs_per_gpu=runs_per_gpu)
    assert slots == expected
    if workers is None:  # every GPU named K times
        assert set(Counter(slots).values()) == {runs_per_gpu}


class _Pool:
    """A worker pool that records how it was made and runs nothing."""

    made: ClassVar[list[tuple[int, list[str], str | None]]] = []

    def __init__(self, workers: int, progress: Any, values: list[str]):
        self.made.append((workers, values, os.environ.get(memory.RUNS_PER_GPU_ENV)))  # what its workers copy

    def submit(self, fn: Any, spec: RunSpec) -> Future:
        future: Future = Future()
        future.set_result({"run_id": spec.run_id, "ok": True, "seconds": 0.0})
        return future

    def shutdown(self, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize(("runs", "workers", "made"), [
    (8, None, (6, ["0", "1"] * 3, "3")),  # the default: one worker per slot, not the CPU count
    (4, None, (4, ["0", "1"] * 2, "3")),  # never more workers than runs
    (8, 2, (2, ["0", "1"], "3")),  # --workers bounds them
])
def test_the_local_backend_starts_a_worker_per_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: int,
                                                    workers: int | None, made: tuple[int, list[str], str]) -> None:
    _machine(monkeypatch, 2)
    monkeypatch.setattr(local, "worker_pool", _Pool)
    monkeypatch.setattr("os.cpu_count", lambda: 2)  # fewer cores than slots: the slots decide
    _Pool.made = []
    specs = [RunSpec(f"r{i}", "sign", i, 2, tmp_path / f"r{i}", TrainConfig()) for i in range(runs)]
    monkeypatch.delenv(memory.RUNS_PER_GPU_ENV, raising=False)
    outcomes = run_sweep(specs, workers=workers, runs_per_gpu=3)
    assert _Pool.made == [made] and len(outcomes) == runs
    assert memory.RUNS_PER_GPU_ENV not in os.environ  # the sweep process's own environment is left as it was


def test_the_plan_line_counts_a_worker_per_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    from grpolab.commands import compare as command

    _machine(monkeypatch, 2)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    sweep = CompareConfig(estimators="sign", group_sizes="2", seeds=8, lrs="1e-4", runs_per_gpu=3)
    assert " x 6 worker(s) = " in command._plan_line(sweep, TrainConfig(), large=False)
    one = CompareConfig(estimators="sign", group_sizes="2", seeds=8, lrs="1e-4")
    assert " x 2 worker(s) = " in command._plan_line(one, TrainConfig(), large=False)  # K = 1: one per GPU


def test_a_worker_is_started_with_the_runs_that_share_its_gpu() -> None:
    """The worker process's environment carries K, and a run in it reads K (its sampler's share)."""
    progress = multiprocessing.get_context("spawn").Queue()
    with local.children_environment(3):
        pool = worker_pool(1, progress, [""])
        try:
            assert pool.submit(runs_per_gpu_in_worker).result(timeout=180) == 3
        finally:
            pool.shutdown(wait=True)


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("gpus_per_run", "visible", "run_devices", "runs_per_gpu", "message"), [
    (None, 2, {"cpu"}, 2, r"--runs-per-gpu 2 puts several runs on each GPU, but the runs get no GPU \(--device cpu\); "
                          "drop --runs-per-gpu"),
    (0, 2, {"auto"}, 2, r"the runs get no GPU \(--gpus-per-run 0\); drop --runs-per-gpu"),
    (None, 0, {"auto"}, 3, r"the runs get no GPU \(no GPU is seen\); drop --runs-per-gpu"),
    (2, 4, {"auto"}, 2, "--runs-per-gpu 2 shares one GPU among runs, but --gpus-per-run 2 gives each run several; "
                        "use --gpus-per-run 1"),
    (None, 2, {"auto"}, 0, "--runs-per-gpu must be a whole number >= 1, got 0"),
])
def test_runs_per_gpu_that_make_no_sense_are_refused_in_one_line(gpus_per_run: int | None, visible: int,
                                                                 run_devices: set[str], runs_per_gpu: int,
                                                                 message: str) -> None:
    with pytest.raises(UserError, match=message) as refusal:
        gpus_each(gpus_per_run, visible, run_devices, runs_per_gpu)
    assert "\n" not in str(refusal.value)
    assert gpus_each(gpus_per_run, visible, run_devices, 1) >= 0  # K = 1 is never refused for these


def test_k_below_one_is_refused_by_the_config_and_k_is_a_runtime_setting() -> None:
    with pytest.raises(UserError, match="runs_per_gpu must be >= 1, got 0; 1 gives each run its GPU alone"):
        CompareConfig(runs_per_gpu=0)
    assert CompareConfig().runs_per_gpu == 1
    check_runs_per_gpu(4, 1)  # K runs on one GPU each: accepted


def test_a_compare_with_k_on_the_cpu_is_refused_before_anything_is_written(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    for flags in (["--runs-per-gpu", "2"], ["--runs-per-gpu", "2", "--device", "cpu"], ["--runs-per-gpu", "0"]):
        code = main(["compare", *flags, "--out", str(tmp_path / "c")])  # this machine has no GPU
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "runs_per_gpu" in err.replace("-", "_"), err
        assert not (tmp_path / "c" / "compare.yaml").exists()


def test_an_engine_whose_runs_need_a_gpu_each_refuses_k_above_one() -> None:
    vllm = TrainConfig(engine="trl", use_vllm=True)
    with pytest.raises(UserError, match=r"--runs-per-gpu 2 puts several runs on one GPU, but engine trl with use_vllm "
                                        r"needs a GPU for each run .*; use --runs-per-gpu 1 or drop --use-vllm"):
        capabilities.engine("trl").check_shared_gpu(vllm, 2)
    capabilities.engine("trl").check_shared_gpu(vllm, 1)
    capabilities.engine("trl").check_shared_gpu(TrainConfig(engine="trl"), 4)
    capabilities.engine("grpolab").check_shared_gpu(TrainConfig(), 4)


# ---------------------------------------------------------------------------- Ray


class _GpuRay:
    """A Ray already initialised on one live node with one GPU that runs each task at once and records its options."""

    options: ClassVar[list[dict[str, Any]]] = []

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def nodes() -> list[dict[str, Any]]:
        return [{"Alive": True, "Resources": {"CPU": 16.0, "GPU": 1.0}}]

    @classmethod
    def remote(cls, **options: Any) -> Any:
        cls.options.append(options)
        return lambda fn: type("Task", (), {"remote": staticmethod(lambda spec: spec.run_id)})  # the ref: its id

    @staticmethod
    def wait(refs: list[Any], num_returns: int) -> tuple[list[Any], list[Any]]:
        return refs[:num_returns], refs[num_returns:]

    @staticmethod
    def get(ref: Any) -> Any:
        return {"run_id": ref, "ok": True}


@pytest.mark.parametrize("runs_per_gpu", [1, 2, 4, 3])
def test_ray_gives_each_run_a_fraction_of_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                runs_per_gpu: int) -> None:
    from grpolab.sweep.cluster import run_ray

    monkeypatch.setitem(sys.modules, "ray", _GpuRay)
    _GpuRay.options = []
    specs = [RunSpec(f"r{i}", "sign", i, 2, tmp_path / f"r{i}", TrainConfig()) for i in range(2)]
    outcomes = run_ray(specs, 2, lambda event: None, runs_per_gpu=runs_per_gpu)
    assert [outcome["run_id"] for outcome in outcomes] == ["r0", "r1"]
    (options,) = _GpuRay.options
    assert options["num_cpus"] == 1 and options["num_gpus"] == pytest.approx(1 / runs_per_gpu)
    assert runs_per_gpu * options["num_gpus"] <= 1  # K tasks fit one GPU
    env = options.get("runtime_env", {}).get("env_vars", {})
    assert memory.runs_sharing_gpu(env) == runs_per_gpu  # the runs' samplers take their share


def test_ray_refuses_k_for_runs_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grpolab.sweep.cluster import run_ray

    monkeypatch.setitem(sys.modules, "ray", _GpuRay)
    _GpuRay.options = []
    specs = [RunSpec("r0", "sign", 0, 2, tmp_path / "r0", TrainConfig(device="cpu"))]
    with pytest.raises(UserError, match=r"the runs get no GPU \(--device cpu\)"):
        run_ray(specs, 1, lambda event: None, runs_per_gpu=2)
    assert _GpuRay.options == []  # nothing submitted


# ---------------------------------------------------------------------------- the memory check's arithmetic

_SHAPE = memory.ModelShape(layers=2, heads=4, kv_heads=2, head_dim=8, hidden=32, vocab=100, context=None,
                           intermediate=48, gated=True)
_RUN = memory.RunFootprint(shape=_SHAPE, weight_bytes=1000, trained=50, sampler_copy_bytes=500, reference=True,
                           prompts=3, samples=2, prompt_tokens=5, new_tokens=7, micro_batch=4, compute_bytes=2,
                           cast_weight_bytes=300)


def test_one_runs_peak_against_a_hand_computation() -> None:
    # rows = 3 x 2 = 6; a KV slot holds layers 2 x (K, V) 2 x kv_heads 2 x head_dim 8 x 4 bytes = 256 bytes
    sampling = (256 * 6 * (5 + 7)  # the rows' cache
                + 256 * 3 * 5  # the prompts' own cache
                + 3 * 3 * 4 * 5 * 5 * 4  # prefill scores: 3 copies x prompts x heads x Lp x Lp x 4 bytes
                + 4 * 6 * 100 * 4  # 4 copies of the logits
                + 6 * 7 * 20)  # ids, entropies, log-probs, the draws' uniforms
    assert sampling == 36312
    # one micro-batch of 4 rows: 4 completions of 7 tokens and the prompts (5 tokens) of its 2 groups once = 38
    # tokens; a layer saves 2 x hidden 32 (norms) + 2 x 4 x 8 (q, output) + 2 x 2 x 8 (k, v) + 3 x 48 (gated MLP)
    # = 304 values a token, 2 bytes each under bfloat16
    activations = 38 * 2 * 304 * 2
    expected = {"weights": 2 * 1000, "optimizer": 50 * 12, "sampler copy": 500, "sampling": sampling,
                "batch": 6 * 12 * 48, "update": 2 * 4 * 7 * 100 * 2, "activations": activations,
                "autocast copies": 300}
    assert memory.run_peak_parts(_RUN, budget=GIB) == expected
    assert sum(expected.values()) == 100576
    # a budget of one prompt's pass samples one prompt at a time: 2 rows
    one = 256 * 2 * 12 + 256 * 1 * 5 + 3 * 1 * 4 * 25 * 4 + 4 * 2 * 100 * 4 + 2 * 7 * 20
    assert memory.run_peak_parts(_RUN, budget=one)["sampling"] == one == 12104


def test_k_runs_are_refused_past_the_free_memory_in_one_line_naming_the_numbers() -> None:
    one = 100576
    assert sharing.shared_gpu_refusal([_RUN], 3, free=3 * one, gpu="0") is None  # exactly fits
    line = sharing.shared_gpu_refusal([_RUN], 3, free=3 * one - 1, gpu="5")
    assert line is not None and "\n" not in line
    assert line.startswith(f"--runs-per-gpu 3 needs about 3 x {memory.format_bytes(one)} = "
                           f"{memory.format_bytes(3 * one)} of GPU memory (one run: weights 1.95 KiB,")
    assert f"but GPU 5 has {memory.format_bytes(3 * one - 1)} free" in line
    assert "lower --runs-per-gpu (--runs-per-gpu 2 fits), --group-sizes" in line and "--max-new-tokens" in line
    assert "not even one run fits" in (sharing.shared_gpu_refusal([_RUN], 2, free=one - 1, gpu="0") or "")
    bigger = memory.RunFootprint(**{**_RUN.__dict__, "samples": 4})
    assert sharing.shared_gpu_refusal([_RUN, bigger], 1, free=one, gpu="0") is not None  # the largest arm counts


def test_the_check_reads_each_gpus_free_memory_and_names_the_fullest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    free = {0: 40 * GIB, 1: 3 * (1 << 20)}  # GPU 1 is nearly full
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (free[index], 80 * GIB))
    assert sharing.free_bytes_here() == [40 * GIB, 3 * (1 << 20)]
    _machine(monkeypatch, 2, "6,7")
    monkeypatch.setattr(sharing, "gpu_free_bytes", sharing.free_bytes_here)
    monkeypatch.setattr(sharing, "_footprints", lambda configs: [_RUN] * len(configs))
    with pytest.raises(UserError, match=r"--runs-per-gpu 64 needs .* but GPU 7 has 3 MiB free"):
        sharing.check_shared_gpus([TrainConfig()], 64)
    sharing.check_shared_gpus([TrainConfig()], 8)  # 8 x 98.2 KiB fit in 3 MiB
    sharing.check_shared_gpus([TrainConfig()], 1000, free=[])  # no GPU seen: nothing to check


def test_a_compare_whose_k_runs_overfill_a_gpu_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The real estimate of the embedded model's runs (one per group size), against two simulated GPUs."""
    _machine(monkeypatch, 2)
    monkeypatch.setattr(sharing, "gpu_free_bytes", lambda: [40 * GIB, 1 << 20])
    code = main(["compare", "--runs-per-gpu", "4", "--group-sizes", "2,8", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--runs-per-gpu 4 needs about 4 x" in err and "but GPU 1 has 1 MiB free" in err
    assert "not even one run fits" in err and "--group-sizes" in err
    assert not (tmp_path / "c" / "compare.yaml").exists()
    docs = (Path(__file__).resolve().parents[2] / "docs" / "compare.md").read_text()
    shown = docs[docs.index("```\n--runs-per-gpu 4 needs") + 4:].split("\n```")[0]
    assert err == "grpolab compare: error: " + " ".join(shown.split()), "docs/compare.md shows another line"


def test_the_child_process_reads_no_gpu_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert sharing.gpu_free_bytes() == []
    monkeypatch.setattr(sys, "executable", "/bin/false")  # a child that fails: one line, not a traceback
    with pytest.raises(UserError, match=r"could not read the GPUs' free memory \(no output\); use --runs-per-gpu 1"):
        sharing.gpu_free_bytes()


def _lora_parameters(model: nn.Module, targets: str, rank: int) -> int:
    """LoRA's trained parameters counted by hand: r x (in + out) for each targeted linear layer."""
    wanted = set(targets.split(","))
    return sum(rank * (module.in_features + module.out_features) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in wanted)


@pytest.mark.parametrize("lora", [False, True])
def test_a_runs_footprint_is_read_from_its_model_and_task(lora: bool) -> None:
    from grpolab.models import load_policy
    from grpolab.train.lifecycle import load_task_for

    config = TrainConfig(lora=lora, lora_r=4, group_size=3, prompts_per_step=5, max_new_tokens=9, beta=0.1)
    task = load_task_for(config, for_model=False)
    bare = load_policy("embedded").model
    every = sum(p.numel() for p in bare.parameters())
    expected_trained = _lora_parameters(bare, config.lora_targets, 4) if lora else every
    run = sharing.run_footprint(config, load_policy("embedded"), task)
    assert run.trained == expected_trained > 0
    assert run.weight_bytes == 4 * (every + (expected_trained if lora else 0))  # float32, adapters included
    assert run.sampler_copy_bytes == 4 * every  # the lean sampler's float32 copy of a small model
    assert (run.prompts, run.samples, run.new_tokens, run.micro_batch, run.reference) == (5, 3, 9, 64, True)
    assert 0 < run.prompt_tokens <= 128 - 9  # the embedded model's context leaves room for the completion
    assert run.shape == memory.model_shape(bare)
    assert (run.compute_bytes, run.cast_weight_bytes, run.kv_bytes) == (4, 0, 4)  # float32: no autocast, no bf16 cache


def test_a_bfloat16_runs_footprint_counts_autocasts_copies_and_a_bfloat16_cache() -> None:
    from grpolab.models import load_policy
    from grpolab.train.lifecycle import load_task_for

    config = TrainConfig(lora=True, lora_r=4, dtype="bfloat16", sampler_dtype="bfloat16")
    bare = load_policy("embedded").model
    linear = {m.weight.data_ptr(): m.weight.numel() for m in bare.modules() if isinstance(m, nn.Linear)}
    run = sharing.run_footprint(config, load_policy("embedded"), load_task_for(config, for_model=False))
    adapters = _lora_parameters(bare, config.lora_targets, 4)
    assert (run.compute_bytes, run.kv_bytes) == (2, 2)
    assert run.cast_weight_bytes == 2 * (sum(linear.values()) + adapters)  # the base weights and the adapters
    float32 = memory.run_peak_parts(memory.RunFootprint(**{**run.__dict__, "kv_bytes": 4}), GIB)
    bfloat16 = memory.run_peak_parts(run, GIB)
    assert float32["sampling"] - bfloat16["sampling"] == memory.kv_cache_bytes(
        run.shape, run.prompts * run.samples, run.prompt_tokens + run.new_tokens, 2)  # half the rows' cache


def test_a_trl_runs_footprint_is_the_trl_engines_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's engine on a GPU under LoRA and bfloat16: base weights in bfloat16 (so autocast copies only the float32
    adapters), no lean sampler copy, a bfloat16 KV cache, and TRL's micro-batch (the largest divisor of P x G = 15
    within --micro-batch-size 4: 3)."""
    import grpolab.train.trl_engine.run as trl_run
    from grpolab.models import load_policy
    from grpolab.train.lifecycle import load_task_for

    monkeypatch.setattr(trl_run, "loads_bfloat16_weights", lambda config: True)  # as on a CUDA device
    config = TrainConfig(engine="trl", lora=True, lora_r=4, dtype="bfloat16", group_size=3, prompts_per_step=5,
                         micro_batch_size=4)
    bare = load_policy("embedded").model
    every, adapters = sum(p.numel() for p in bare.parameters()), _lora_parameters(bare, config.lora_targets, 4)
    run = sharing.run_footprint(config, load_policy("embedded"), load_task_for(config, for_model=False))
    assert (run.sampler_copy_bytes, run.micro_batch, run.kv_bytes, run.compute_bytes) == (0, 3, 2, 2)
    assert run.weight_bytes == 2 * every + 4 * adapters  # peft keeps the adapters in float32
    assert run.cast_weight_bytes == 2 * adapters


# ---------------------------------------------------------------------------- the sampler's share


def test_each_of_k_runs_samples_under_its_share_of_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (64 * GIB, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *_: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_: 0)
    gpu = torch.device("cuda", 0)
    monkeypatch.delenv(memory.RUNS_PER_GPU_ENV, raising=False)
    assert memory.sampler_budget(gpu) == 16 * GIB  # GPU_SAMPLER_SHARE 0.25 of 64 GiB, alone on the GPU
    for runs, share in ((2, 8 * GIB), (4, 4 * GIB), (32, GIB), (64, GIB)):  # never below the host's 1 GiB
        monkeypatch.setenv(memory.RUNS_PER_GPU_ENV, str(runs))
        assert memory.sampler_budget(gpu) == share
    assert memory.sampler_budget(torch.device("cpu")) == memory.SAMPLER_BUDGET_BYTES  # the host's is not shared
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(memory.RUNS_PER_GPU_ENV, bad)
        with pytest.raises(UserError, match=f"{memory.RUNS_PER_GPU_ENV} must be a whole number >= 1"):
            memory.sampler_budget(gpu)
