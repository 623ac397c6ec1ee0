"""The sampler's numbers on one GPU in one call: copy bandwidth, sampling tokens/s and roofline fraction at
SmolLM2-135M's and Qwen2.5-0.5B's shapes against the floors, kernels per decoding step, the RL step and the update
alone against TRL's, and the static step under ``torch.compile``; a JSON file and a Markdown table (docs/gpu.md).

Sections, each in its own process under its own time limit (``SECTIONS``), so that a section that fails, hangs or
runs out of time records its error and the next one runs; the files are rewritten after every section, so a call
cut short keeps what it measured:

* ``bandwidth``: a 1 GiB device-to-device copy, read + write bytes per second, the best of 5
  (``bench_gpu.bandwidth``).
* ``sampling-smollm2``, ``sampling-qwen2.5``: ``rollout.sample`` (what training and evaluation call; its default
  path on CUDA is the lean decoder's CUDA graph) on random weights of the shape (``gpu_check_shapes.SHAPES``: a
  ``LlamaConfig`` and a ``Qwen2Config``, no download), float32 master weights, the lean copy in bfloat16 (``dtype``),
  the shape's tokenizer, 32-token random prompts, temperature 1, every configuration of ``CONFIGS`` in one pass
  (``budget_bytes`` set to the pass's own need), one warm-up of the same size, then one timed run that stops after
  ``torch.cuda.synchronize()``. Tokens: completion tokens through the first EOS (random weights rarely draw it).
  Roofline fraction: ``ROOFLINE``.
* ``sampling-smollm2-bf16-stream``: ``sampling-smollm2`` with ``fast_decode.stream = "bfloat16"`` (the residual
  stream, norms and rotation in bfloat16, the residual adds fused into the matmuls: fewer kernels a step), against the
  same floors; on the CPU (``--cpu``) the static step with a bfloat16 cache, which that stream needs.
* ``kernels``: ``benchmarks/bench_decode_kernels.py`` at SmolLM2-135M's shape (kernels per step, per layer, fixed).
* ``rl-step``: ``benchmarks/_grpo_pair.py`` as ``bench_smollm2.py`` sets it up (LoRA r = 16, bfloat16 on both sides,
  the chat-template additions task), on the SmolLM2-shaped random model, G = 8, P = 16, up to 128 new tokens,
  temperature 1, both sides on the GPU, TRL's copy in bfloat16 weights; rewards from ``PARITY_VERIFIER`` (the
  completion's length in characters is even), so about half the completions of every group are rewarded and both
  sides train on them (random weights never solve the task); TRL's copy is in bfloat16 in the smoke mode too. One
  block of 3 steps per side, the first dropped: the medians of the step, of the update alone (grpolab
  ``perf/update_time``; TRL: its step less its generation and scoring, synchronised at the step's end) and their
  ratios.
  grpolab's update forwards the whole batch as one micro-batch (``micro_batch_size`` = P x G), as TRL forwards its
  ``per_device_train_batch_size`` of P x G rows; the H100 run of 2026-11-28 took ``bench_smollm2``'s CPU setting of
  16 rows instead, 8 micro-batches against TRL's one (docs/benchmarks.md).
* ``update``: grpolab's update alone on the same model and batch shape as ``rl-step``, at each micro-batch size of
  ``UPDATE_MICRO_BATCHES`` (16 rows up to the whole batch), 3 steps each, the first dropped: the median
  ``perf/update_time`` and the median with prefix packing off (``prefix_packing.logprobs`` made to decline, so the
  padded forward runs), to say where the update's time goes; and each size's peak GPU memory (above what the
  process held before its trainer was made) beside grpolab's estimate of it (``memory.run_peak_parts``, what
  ``compare --runs-per-gpu`` checks), which is meant to stay below it.
* ``compiled``: ``bench_decode_kernels.py --compile max-autotune-no-cudagraphs`` (the static step compiled, under
  the decoder's CUDA graph capture), last because compiling may take minutes.

``--cpu --tiny`` runs the same sections on the CPU with tiny models (the GPU check's CPU-mode sizes) and tiny batches
in seconds; ``tests/test_gpu_sampler_numbers.py`` runs it. Its numbers are a smoke test of the code, not
measurements: the floors read "n/a" there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "src", ROOT / "scripts", ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import gpu_sampler_report  # noqa: E402 - the Markdown table of the result

SHAPE_NAMES = {"sampling-smollm2": "smollm2-135m-shape", "sampling-smollm2-bf16-stream": "smollm2-135m-shape",
               "sampling-qwen2.5": "qwen2.5-0.5b-shape"}
STREAMS = {"sampling-smollm2-bf16-stream": "bfloat16"}
"""``fast_decode.stream`` of the sampling sections that set it (the others: its default, "float32")."""
FLOOR_SECTIONS = ("sampling-smollm2", "sampling-smollm2-bf16-stream")
"""The sampling sections held to ``FLOORS``."""
CONFIGS = {
    "gpu": [(16, 8, 128), (64, 8, 128), (16, 8, 512)],
    "tiny": [(2, 2, 8), (4, 2, 8), (2, 2, 16)],
}
"""(prompts, samples, new tokens) of each sampling row: 128 rows x 128 tokens, 512 rows x 128 and 128 rows x 512
(tiny: 4 x 8, 8 x 8, 4 x 16)."""
FLOORS = (100_000.0, 150_000.0, None)
"""Tokens/s floors of the SmolLM2-shaped sampling rows, by position in ``CONFIGS`` (128 rows x 128 tokens: 100,000;
512 rows x 128 in one pass: 150,000; none at 512 tokens)."""
ROOFLINE = (
    "roofline = (tokens/s / B) x bytes/step / copy bandwidth, bytes/step = 2 x (decoder-layer matrices + "
    "V x D) + 2 x 2 x layers x B x Hkv x Dh x (Lp + T / 2): bfloat16 weights, and the bfloat16 K and V of the "
    "written prefix at its mean length over the rollout"
)
PARITY_VERIFIER = "bench_length_parity"
UPDATE_MICRO_BATCHES = (16, 64, 128)
"""Micro-batch sizes (rows) of the ``update`` section; the tiny mode takes those up to its batch of 4 rows."""
PROMPT_WIDTH = 32


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------- the sections


def bandwidth_section(spec: dict[str, Any]) -> dict[str, Any]:
    import bench_gpu

    return {"bandwidth_gb_s": bench_gpu.bandwidth(not spec["cpu"]) / 1e9}


def step_bytes(model: Any, rows: int, prompt_tokens: int, new_tokens: int) -> int:
    """``ROOFLINE``'s bytes one decoding step reads."""
    from grpolab.engine import memory

    matrices = sum(p.numel() for p in model.model.layers.parameters() if p.dim() == 2)
    head = model.get_output_embeddings().weight.numel()
    cache = memory.kv_cache_bytes(memory.model_shape(model), rows, prompt_tokens + new_tokens // 2, dtype_bytes=2)
    return 2 * (matrices + head) + cache


def _sample_row(
    model: Any, tokenizer: Any, config: tuple[int, int, int], bandwidth: float, floor: float | None
) -> dict[str, Any]:
    """One sampling configuration: a warm-up, then the timed rollout (``sampling-*`` in the docstring)."""
    import torch

    from bench_decode_kernels import prompts as random_prompts
    from grpolab.engine import memory
    from grpolab.engine.rollout import sample

    prompt_count, samples, tokens = config
    cuda = next(model.parameters()).is_cuda
    ids, mask = random_prompts(model.config.vocab_size, prompt_count, PROMPT_WIDTH)
    one_pass = memory.sampling_bytes(memory.model_shape(model), prompt_count, samples, PROMPT_WIDTH, tokens)

    def run(seed: int) -> Any:
        return sample(
            model,
            tokenizer,
            ids,
            mask,
            num_samples=samples,
            max_new_tokens=tokens,
            dtype="bfloat16",
            generator=torch.Generator().manual_seed(seed),
            budget_bytes=one_pass,
        )

    run(0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    _sync(cuda)
    started = time.perf_counter()
    rollout = run(1)
    _sync(cuda)
    seconds = time.perf_counter() - started
    rows, count = prompt_count * samples, int(rollout.completion_mask.sum())
    per_step = step_bytes(model, rows, PROMPT_WIDTH, tokens)
    return {
        "rows": rows,
        "prompts": prompt_count,
        "samples": samples,
        "new_tokens": tokens,
        "tokens": count,
        "seconds": seconds,
        "tokens_per_s": count / seconds,
        "bytes_per_step": per_step,
        "roofline": count / seconds / rows * per_step / bandwidth,
        "path": rollout.sampler,
        "fallback": rollout.sampler_fallback,
        "floor_tokens_per_s": floor,
        "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
    }


def sampling_section(spec: dict[str, Any], section: str) -> dict[str, Any]:
    from _common import fast_decode_settings

    name, stream = SHAPE_NAMES[section], STREAMS.get(section, "float32")
    settings = {"stream": stream}
    if stream != "float32" and spec["cpu"]:  # the stream needs the static step's bfloat16 cache, CUDA's default
        settings.update(step_mode="static", kv_cache="bfloat16")
    with fast_decode_settings(settings):  # put back after the section (``--inline`` runs every section in one process)
        return _sampling_result(spec, section, name, stream)


def _sampling_result(spec: dict[str, Any], section: str, name: str, stream: str) -> dict[str, Any]:
    import bench_gpu
    import gpu_check_shapes
    from bench_decode_kernels import shape_model

    bandwidth = (spec.get("bandwidth_gb_s") or bench_gpu.bandwidth(not spec["cpu"]) / 1e9) * 1e9
    with tempfile.TemporaryDirectory() as work:
        tokenizer, source = gpu_check_shapes.shape_tokenizer(name, Path(work))
    model = shape_model(name, spec["tiny"], "cpu" if spec["cpu"] else "cuda", tokenizer=tokenizer)
    floors = FLOORS if section in FLOOR_SECTIONS else (None,) * len(FLOORS)
    configs = CONFIGS["tiny" if spec["tiny"] else "gpu"]
    rows = [
        _sample_row(model, tokenizer, config, bandwidth, floor) for config, floor in zip(configs, floors, strict=True)
    ]
    return {
        "model": name,
        "stream": stream,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer": source,
        "bandwidth_gb_s": bandwidth / 1e9,
        "rows": rows,
    }


def kernels_section(spec: dict[str, Any], compile_mode: str | None = None) -> dict[str, Any]:
    import bench_decode_kernels

    args = argparse.Namespace(
        cpu=spec["cpu"],
        model="smollm2-135m-shape",
        steps=4,
        compile=compile_mode,
        compile_backend=spec["compile_backend"],
    )
    return bench_decode_kernels.measure(args)


def _register_parity() -> None:
    from grpolab.verifiers import available, register

    if PARITY_VERIFIER not in available():
        register(PARITY_VERIFIER)(lambda completion, reference: float(len(completion) % 2 == 0))


def _rl_settings(spec: dict[str, Any], folder: Path) -> Any:
    """``bench_smollm2``'s pair settings on the random model in ``folder``: P = 16, G = 8, up to 128 new tokens
    (tiny: 2, 2, 8), the parity reward, temperature 1, grpolab's whole batch in one micro-batch."""
    import bench_smollm2

    prompts, samples, tokens = (2, 2, 8) if spec["tiny"] else (16, 8, 128)
    return dataclasses.replace(
        bench_smollm2.settings(),
        model=str(folder),
        prompts=prompts,
        group_size=samples,
        max_new_tokens=tokens,
        verifier=PARITY_VERIFIER,
        temperature=1.0,
        device="cpu" if spec["cpu"] else "cuda",
        trl_bf16_weights=True,
        micro_batch_size=prompts * samples,
    )


def _random_smollm2(spec: dict[str, Any], work: Path) -> Path:
    import gpu_check_shapes

    folder = work / "smollm2-135m-shape"
    gpu_check_shapes.save_random_model(folder.name, folder, spec["tiny"])
    return folder


def rl_step_section(spec: dict[str, Any]) -> dict[str, Any]:
    from _grpo_pair import compare_steps, describe

    _register_parity()
    with tempfile.TemporaryDirectory() as work:
        settings = _rl_settings(spec, _random_smollm2(spec, Path(work)))
        times = compare_steps(settings, blocks=1, steps_per_block=3)
    info = describe(times)
    return {
        "model": "smollm2-135m-shape",
        "prompts": settings.prompts,
        "group_size": settings.group_size,
        "max_new_tokens": settings.max_new_tokens,
        "micro_batch_size": settings.micro_batch_size,
        "trl_weights": times.trl_weights.removeprefix("torch."),
        "step_ratio": times.ratio,
        **info,
    }


def _counting(forward: Callable[..., Any], packed: list[bool]) -> Callable[..., Any]:
    """``forward`` that appends to ``packed`` whether each call packed (returned log-probs, not None)."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        result = forward(*args, **kwargs)
        packed.append(result is not None)
        return result

    return counted


def _update_times(trainer: Any, steps: int, first: int) -> list[float]:
    return [trainer.step(first + i)["perf/update_time"] for i in range(steps)][1:]


def _fresh_peak() -> int:
    """Free what earlier runs of this process left, reset the peak statistics; the bytes still allocated (0 on the
    CPU)."""
    import gc

    import torch

    gc.collect()
    if not torch.cuda.is_available():
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def _peak_and_estimate(base: int, footprint: Any) -> dict[str, Any]:
    """The run's peak GPU memory since ``_fresh_peak`` (above ``base``; None on the CPU) beside grpolab's estimate
    of it (``gpu_check_shapes.run_estimate`` of ``footprint``), in MiB."""
    import torch

    import gpu_check_shapes

    cuda = torch.cuda.is_available()
    return {"peak_gpu_mib": (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else None,
            "estimate_mib": gpu_check_shapes.run_estimate(footprint) / 2**20}


def update_section(spec: dict[str, Any]) -> dict[str, Any]:
    from unittest import mock

    from _common import median
    from _grpo_pair import _grpolab_config
    from grpolab.engine import prefix_packing
    from grpolab.models import load_policy
    from grpolab.sweep.sharing import run_footprint
    from grpolab.train.lifecycle import load_task_for
    from grpolab.train.trainer import Trainer

    _register_parity()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        settings = _rl_settings(spec, _random_smollm2(spec, Path(work)))
        batch = settings.prompts * settings.group_size
        footprint = None
        for size in [size for size in UPDATE_MICRO_BATCHES if size <= batch] or [batch]:
            config = _grpolab_config(dataclasses.replace(settings, micro_batch_size=size))
            footprint = footprint or run_footprint(config, load_policy(settings.model), load_task_for(config))
            base = _fresh_peak()
            trainer = Trainer(
                config, Path(work) / f"run-{size}", policy=load_policy(settings.model), task=load_task_for(config)
            )
            packed_forwards: list[bool] = []
            with mock.patch.object(prefix_packing, "logprobs", _counting(prefix_packing.logprobs, packed_forwards)):
                packed = _update_times(trainer, 3, 1)
            with mock.patch.object(prefix_packing, "logprobs", lambda *args, **kwargs: None):
                padded = _update_times(trainer, 3, 4)
            rows.append(
                {
                    "micro_batch_size": size,
                    "micro_batches": -(-batch // size),
                    "update_ms": 1000 * median(packed),
                    "update_padded_ms": 1000 * median(padded),
                    "packed_forwards": sum(packed_forwards),
                    "forwards": len(packed_forwards),
                    **_peak_and_estimate(base, dataclasses.replace(footprint, micro_batch=size)),
                }
            )
            del trainer
    return {
        "model": "smollm2-135m-shape",
        "prompts": settings.prompts,
        "group_size": settings.group_size,
        "max_new_tokens": settings.max_new_tokens,
        "rows": rows,
    }


SECTIONS: dict[str, tuple[float, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "bandwidth": (20, bandwidth_section),
    "sampling-smollm2": (90, lambda spec: sampling_section(spec, "sampling-smollm2")),
    "sampling-smollm2-bf16-stream": (90, lambda spec: sampling_section(spec, "sampling-smollm2-bf16-stream")),
    "sampling-qwen2.5": (90, lambda spec: sampling_section(spec, "sampling-qwen2.5")),
    "kernels": (60, kernels_section),
    "rl-step": (150, rl_step_section),
    "update": (120, update_section),
    "compiled": (130, lambda spec: kernels_section(spec, "max-autotune-no-cudagraphs")),
}
"""Section -> (time limit in seconds, what it runs), in the order they run; 750 s in all (``--budget-s`` cuts it)."""


# ---------------------------------------------------------------------------------------------- running them


def child(section: str, spec_path: Path) -> int:
    """Run one section (``--child``): its result, or its error, as JSON in ``spec["result"]``."""
    spec = json.loads(spec_path.read_text())
    record = run_inline(section, spec)
    Path(spec["result"]).write_text(json.dumps(record, indent=1))
    return 0 if record["status"] == "ok" else 1


def run_inline(section: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One section in this process: {"status": "ok", "result": ...} or {"status": "error", "error": ...}."""
    started = time.perf_counter()
    try:
        if section in spec.get("inject_failure", []):
            raise RuntimeError(f"failure injected into {section} (--inject-failure)")
        record = {"status": "ok", "result": SECTIONS[section][1](spec)}
    except Exception as error:  # a failing section is recorded, and the next one runs
        traceback.print_exc()
        record = {"status": "error", "error": f"{type(error).__name__}: {' '.join(str(error).split())[:400]}"}
    return {**record, "seconds": time.perf_counter() - started}


def run_child(section: str, spec: dict[str, Any], limit: float, work: Path) -> dict[str, Any]:
    """One section in a child process killed after ``limit`` seconds; its log's tail kept on failure."""
    spec_path, log = work / f"{section}.spec.json", work / f"{section}.log"
    spec_path.write_text(json.dumps({**spec, "result": str(work / f"{section}.json")}))
    started = time.perf_counter()
    with log.open("w") as handle:
        try:
            subprocess.run(
                [sys.executable, __file__, "--child", section, "--spec", str(spec_path)],
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=limit,
                cwd=ROOT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {
                "status": "timeout",
                "error": f"killed at its time limit of {limit:.1f} s",
                "seconds": time.perf_counter() - started,
                "log_tail": log.read_text()[-2000:],
            }
    result = work / f"{section}.json"
    if not result.is_file():
        return {
            "status": "error",
            "error": "the child wrote no result (it crashed)",
            "seconds": time.perf_counter() - started,
            "log_tail": log.read_text()[-2000:],
        }
    record = json.loads(result.read_text())
    if record["status"] != "ok":
        record["log_tail"] = log.read_text()[-2000:]
    return record


def run_all(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every chosen section in order, each under min(its limit, what the budget leaves); the files are written
    after each."""
    started = time.perf_counter()
    spec = {
        "cpu": args.cpu,
        "tiny": args.tiny,
        "compile_backend": args.compile_backend,
        "inject_failure": args.inject_failure,
    }
    result: dict[str, Any] = {
        "device": gpu_sampler_report.device_name(args.cpu),
        "sections": {},
        "roofline_formula": ROOFLINE,
        "smoke": args.cpu or args.tiny,
    }
    for section in args.sections:
        left = args.budget_s - (time.perf_counter() - started)
        if left < 5:
            record = {"status": "skipped", "error": f"the budget of {args.budget_s:.0f} s was spent", "seconds": 0.0}
        elif args.inline:
            record = run_inline(section, spec)
        else:
            record = run_child(section, spec, min(SECTIONS[section][0] * args.limit_scale, left), work)
        result["sections"][section] = record
        if section == "bandwidth" and record["status"] == "ok":
            spec["bandwidth_gb_s"] = record["result"]["bandwidth_gb_s"]
        result["seconds"] = time.perf_counter() - started
        gpu_sampler_report.write(args.out, result)
        print(
            f"{section}: {record['status']} in {record['seconds']:.1f} s"
            + (f" ({record['error']})" if "error" in record else ""),
            flush=True,
        )
    return result


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (with --tiny: the test's smoke mode)")
    parser.add_argument("--tiny", action="store_true", help="tiny models and batches")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "runs" / "gpu-sampler-numbers",
        help="folder for gpu-sampler-numbers.json and .md",
    )
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated sections to run, in order")
    parser.add_argument("--budget-s", type=float, default=540.0, help="the whole run's time budget")
    parser.add_argument("--limit-scale", type=float, default=1.0, help="multiply every section's time limit")
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile's backend in the compiled section (the test: 'eager')",
    )
    parser.add_argument("--inline", action="store_true", help="run the sections in this process (no time limits)")
    parser.add_argument("--inject-failure", default="", help="comma-separated sections made to raise")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    args.inject_failure = [s for s in args.inject_failure.split(",") if s]
    unknown = sorted(set(args.sections + args.inject_failure) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; the sections are {', '.join(SECTIONS)}")
    if not args.cpu and not args.child and not _has_cuda():
        parser.error("torch sees no CUDA GPU; run with --cpu --tiny for the CPU smoke mode")
    return args


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        return child(args.child, args.spec)
    with tempfile.TemporaryDirectory(prefix="gpu-sampler-numbers-") as work:
        result = run_all(args, Path(work))
    print(gpu_sampler_report.markdown(result), flush=True)
    print(f"written: {args.out / 'gpu-sampler-numbers.md'}, gpu-sampler-numbers.json", flush=True)
    return 0 if all(r["status"] == "ok" for r in result["sections"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
