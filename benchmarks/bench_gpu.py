"""Sampling on one GPU: grpolab's lean sampler stepping eagerly and through its CUDA graph, against TRL's generation.

    on the GPU machine (docs/benchmarks.md):  PYTHONPATH=/tmp/site:src python3 benchmarks/bench_gpu.py
    tiny, on the CPU (tests/test_gpu_bench.py):      python benchmarks/bench_gpu.py --cpu

The model is the GPU check's (``scripts/gpu_check_shapes.py``, imported, not copied): random weights of SmolLM2-135M's
shape with its real-vocabulary tokenizer, loaded in float32 and wrapped with a fresh LoRA adapter, as grpolab's engine
trains it. Prompts: the ``reverse`` task's test prompts; G = 8 samples each, up to 128 new tokens, temperature 1 (random
weights rarely draw EOS, so most rows run to the cap). For P = 16 and 64 prompts it times, after one warm-up each:

* ``grpolab eager``: ``rollout.sample`` with ``fast_decode.step_mode = "dynamic"`` (the step before CUDA graphs);
* ``grpolab graph``: ``rollout.sample`` as it runs by default on CUDA (the static step with the draw inside it, each
  length bucket's step captured as a CUDA graph the first time a rollout reaches it, the captures inside the timing;
  a bfloat16 KV cache);
* ``grpolab graph f32 full``: the same graphs with a float32 KV cache attended over its whole capacity at every step
  (``fast_decode.kv_cache = "float32"``, ``bucket_slots = 0``): what the bfloat16 cache and the buckets buy;
* ``grpolab graph bf16 stream`` (CUDA only): the default graphs with ``fast_decode.stream = "bfloat16"`` (the
  residual stream, norms and rotation in bfloat16, the residual adds fused into the matmuls);
* ``trl generate``: TRL 1.16's generation without vLLM, as the GPU check calls it
  (``gpu_check_sampling.trl_generation``). TRL at P = 64 runs only if the time budget (``--budget-s``) leaves room
  for it.

Columns: completion tokens (through the first EOS) per second, the clock stopped after ``torch.cuda.synchronize()``;
the roofline fraction: the bytes a decoding step must read (the lean copy's bfloat16 matrices and lm_head, plus the
KV cache at its mean length over the rollout, Lp + T / 2, in the dtype the row's sampler keeps it: float32 but for
``grpolab graph``'s bfloat16) over the mean step time (seconds / T), against the bandwidth of a 1 GiB
device-to-device copy measured in the same run (read + write), so it is the share of the hardware's limit each
sampler reaches; and peak GPU memory
(``torch.cuda.max_memory_allocated`` after a reset, per row). It prints a Markdown table and, with ``--out``, JSON.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "src", ROOT / "scripts", ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

import gpu_check_sampling  # noqa: E402 - the GPU check's samplers and TRL generation
import gpu_check_shapes  # noqa: E402 - the GPU check's models and tokenizers
from _common import fast_decode_settings, print_and_save  # noqa: E402

MODEL = "smollm2-135m-shape"


def bandwidth(cuda: bool) -> float:
    """Bytes per second of a large device-to-device copy (read + write), the best of 5."""
    size = 2**30 if cuda else 2**26
    src = torch.empty(size, dtype=torch.uint8, device="cuda" if cuda else "cpu")
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        gpu_check_sampling.sync(cuda)
        started = time.perf_counter()
        dst.copy_(src)
        gpu_check_sampling.sync(cuda)
        best = min(best, time.perf_counter() - started)
    del src, dst
    return 2 * size / best


def step_bytes(model: Any, rows: int, prompt_width: int, max_new_tokens: int, settings: dict[str, Any]) -> int:
    """Bytes one decoding step reads at the rollout's mean cache length: the lean copy's matrices (what
    ``fast_decode.build`` makes) and the KV cache [layers, B, Hkv, Lp + T / 2, Dh] x 2 in the dtype the decoder keeps
    it under ``settings`` (``fast_decode``'s module settings; float32 for TRL's row, which has none)."""
    from grpolab.engine import fast_decode

    with fast_decode_settings(settings or {"step_mode": "dynamic"}):
        lean = fast_decode.build(model, fast_decode.preferred_dtype(model))
        cache_bytes = lean.kv_dtype.itemsize
    matrices = [lean.lm_head] + [m for layer in lean.layers for m in (layer.qkv, layer.out, layer.gate_up, layer.down)]
    weights = sum(m.numel() * m.element_size() for m in matrices)
    slots = prompt_width + max_new_tokens / 2
    cache = len(lean.layers) * rows * lean.kv_heads * slots * lean.head_dim * cache_bytes * 2
    del lean
    return int(weights + cache)


def build(cpu: bool) -> tuple[Any, Any, str]:
    """The GPU check's SmolLM2-shaped random model (tiny on the CPU), float32 with a fresh LoRA adapter, on the
    device; its tokenizer; where the tokenizer came from."""
    from grpolab.config import TrainConfig
    from grpolab.train.lifecycle import wrap_lora

    with tempfile.TemporaryDirectory() as work:
        tokenizer, source = gpu_check_shapes.shape_tokenizer(MODEL, Path(work))
    model = gpu_check_shapes.random_model(gpu_check_shapes.SHAPES[MODEL], tokenizer, cpu).float()
    model = wrap_lora(model, TrainConfig(lora=True)).to("cpu" if cpu else "cuda")
    model.eval()
    return model, tokenizer, source


def grpolab_settings() -> dict[str, dict[str, Any]]:
    """grpolab's rows: name -> ``fast_decode`` settings (on the CPU the graph rows run the static step eagerly). The
    bfloat16 stream's row runs on CUDA only: it needs a bfloat16 copy, and the CPU mode's tiny model samples in
    float32 (``fast_decode.preferred_dtype``); ``gpu_sampler_numbers.py --cpu --tiny`` runs the stream on the CPU."""
    cuda = torch.cuda.is_available()
    graph = "auto" if cuda else "static"
    rows = {"grpolab eager": {"step_mode": "dynamic"}, "grpolab graph": {"step_mode": graph},
            "grpolab graph f32 full": {"step_mode": graph, "kv_cache": "float32", "bucket_slots": 0}}
    if cuda:
        rows["grpolab graph bf16 stream"] = {"step_mode": graph, "stream": "bfloat16"}
    return rows


def samplers(model: Any, tokenizer: Any, trl: bool) -> dict[str, Any]:
    """name -> fn(ids, mask, samples, max_new_tokens) -> completion tokens."""
    plain = gpu_check_sampling.grpolab_sampler(model, tokenizer)

    def with_settings(settings: dict[str, Any]) -> Any:
        def run(*args: Any) -> int:
            with fast_decode_settings(settings):
                return plain(*args)
        return run

    found = {name: with_settings(settings) for name, settings in grpolab_settings().items()}
    if trl:
        found["trl generate"] = gpu_check_sampling.trl_generation(model, tokenizer)
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    cuda = torch.cuda.is_available() and not args.cpu
    from grpolab.engine.rollout import encode_prompts
    from grpolab.tasks import get_task

    model, tokenizer, source = build(not cuda)
    task = get_task("reverse")
    prompt_counts = [2] if args.cpu else [16, 64]
    samples, tokens = (2, 4) if args.cpu else (8, 128)
    texts = [p.prompt for p in (task.test * 4)[: max(prompt_counts)]]
    ids, mask = encode_prompts(tokenizer, texts, use_chat_template=task.use_chat_template)
    try:
        import trl  # noqa: F401
        has_trl = True
    except ImportError:
        has_trl = False
    runs = samplers(model, tokenizer, has_trl)
    for fn in runs.values():  # warm-up: kernels, allocator, cuBLAS handles
        fn(ids[:2], mask[:2], 2, 8)
    rate = bandwidth(cuda)
    rows: list[dict[str, Any]] = []
    settings = grpolab_settings()
    for prompts in prompt_counts:
        for name, fn in runs.items():
            per_step = step_bytes(model, prompts * samples, ids.shape[1], tokens, settings.get(name, {}))
            row = {"sampler": name, "prompts": prompts, "samples": samples, "max_new_tokens": tokens}
            rows.append(row)
            elapsed = time.perf_counter() - started
            trl_before = next((r for r in rows if r["sampler"] == name and "seconds" in r), None)
            if name.startswith("trl") and trl_before and elapsed + 2.5 * trl_before["seconds"] > args.budget_s:
                row["skipped"] = f"time budget ({args.budget_s:.0f} s)"
                continue
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            gpu_check_sampling.sync(cuda)
            clock = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                count = fn(ids[:prompts], mask[:prompts], samples, tokens)
            gpu_check_sampling.sync(cuda)
            seconds = time.perf_counter() - clock
            row.update(tokens=count, seconds=seconds, tokens_per_s=count / seconds,
                       roofline=per_step / (seconds / tokens) / rate,
                       peak_mib=torch.cuda.max_memory_allocated() / 2**20 if cuda else None)
    device = torch.cuda.get_device_name(0) if cuda else "cpu"
    return {"device": device, "model": MODEL, "tokenizer": source, "bandwidth_gb_s": rate / 1e9,
            "parameters": sum(p.numel() for p in model.parameters()), "rows": rows,
            "seconds": time.perf_counter() - started}


def table(result: dict[str, Any]) -> str:
    lines = [f"Sampling on {result['device']}: {result['model']} ({result['parameters'] / 1e6:.1f}M parameters with "
             f"LoRA, tokenizer {result['tokenizer']}); copy bandwidth {result['bandwidth_gb_s']:,.0f} GB/s; "
             f"{result['seconds']:.1f} s in all.", "",
             "| sampler | P x G x T | tokens | seconds | tokens/s | x TRL | roofline | peak GPU MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        shape = f"{row['prompts']} x {row['samples']} x {row['max_new_tokens']}"
        if "skipped" in row:
            lines.append(f"| {row['sampler']} | {shape} | skipped: {row['skipped']} | | | | | |")
            continue
        trl = next((r for r in result["rows"] if r["sampler"] == "trl generate" and r["prompts"] == row["prompts"]
                    and "tokens_per_s" in r), None)
        ratio = f"{row['tokens_per_s'] / trl['tokens_per_s']:.2f}" if trl else "n/a"
        peak = f"{row['peak_mib']:,.0f}" if row["peak_mib"] is not None else "n/a"
        lines.append(f"| {row['sampler']} | {shape} | {row['tokens']:,} | {row['seconds']:.2f} | "
                     f"{row['tokens_per_s']:,.0f} | {ratio} | {100 * row['roofline']:.1f}% | {peak} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="tiny model and batch on the CPU (the test's mode)")
    parser.add_argument("--budget-s", type=float, default=40.0,
                        help="skip TRL's P = 64 row when it would end past this many seconds from the start")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = measure(args)
    print_and_save(table(result), result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
