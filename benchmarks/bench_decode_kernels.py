"""Kernels per token of the lean sampler: what one decoding step launches, per layer and fixed, eager, as a CUDA
graph, and (``--compile MODE``) with the static step compiled by ``torch.compile``.

    on the GPU machine (docs/benchmarks.md):  PYTHONPATH=/tmp/site:src python3 benchmarks/bench_decode_kernels.py
    tiny, on the CPU (tests/test_decode_kernels.py):   python benchmarks/bench_decode_kernels.py --cpu

The model: random weights of a real model's shape (``gpu_check_shapes.SHAPES``, default SmolLM2-135M's; ``--cpu``:
the tiny sizes of the GPU check's CPU mode), float32 master weights, the lean copy in bfloat16 as ``rollout.sample``
makes it (``fast_decode.build``). The decoder is driven as ``rollout.sample`` drives it: ``prefill`` once, then per
token the dynamic ``step`` or the static step's loop (``static_decode``, the greedy draw inside the step), its mode set
by ``fast_decode.step_mode`` before the build. Variants (rows):

* ``static eager``: the static-shape step run eagerly (``step_mode = "static"``): what the CUDA graph captures.
* ``graph``: the same step replayed as a CUDA graph (``"graph"``, CUDA only).
* ``dynamic``: the CPU's step (``"dynamic"``, CPU only).
* ``... bf16 stream``: the static step (eager on the CPU, the graph on CUDA) with ``fast_decode.stream = "bfloat16"``:
  the residual stream, norms and rotation in bfloat16 over a bfloat16 cache, the residual adds fused into the
  matmuls. On the CPU also ``static eager, bf16 cache`` (``kv_cache = "bfloat16"``, the float32 stream): the CUDA
  default's structure, to set the stream's rows against.
* ``compiled MODE``: ``LeanLlama.static_step`` replaced on the instance by ``torch.compile(..., mode=MODE)``. With
  "max-autotune-no-cudagraphs" or "default" it runs under the decoder's own CUDA graph capture (as gpt-fast captures
  its compiled decode step); with "reduce-overhead" the compiler's CUDA graphs replace it (the step runs "static").
  Where the compiler is unavailable or fails, the row says so and why.

Columns, each per decoding step (the mean over ``--steps`` profiled steps after two warm-up steps):

* *kernels*: on CUDA the GPU kernels ``torch.profiler`` records (memcpy and memset counted apart); on the CPU,
  which launches nothing, the proxy: the aten operators (and oneDNN's prepacked matmuls) the step dispatches at its
  top level, less views and no-op casts (``count_events``). A CUDA graph replays the kernels it captured under one
  ``cudaGraphLaunch``; the graph row shows how many of them the profiler records (the static eager row is what was
  captured).
* *per layer* and *fixed*: the same count on 1-layer and 2-layer models of the shape (per layer = the difference,
  fixed = the 1-layer count less it); *check*: fixed + layers x per layer, against the full model's count.
* *host launches*: the CUDA runtime calls that start device work (kernel and graph launches, async copies and sets).
* *ms/step*: wall time of ``--steps`` steps without the profiler, after ``torch.cuda.synchronize()``.

Last, per *token* of ``rollout.sample`` (what a rollout pays, the sampling loop's draws and EOS tracking included):
the kernels of a rollout of 24 new tokens less those of one of 8, over 16 (the prefill and the copy cancel).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "src", ROOT / "scripts", ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

import gpu_check_shapes  # noqa: E402 - the real models' shapes and their random-weight builder
from _common import fast_decode_settings, print_and_save  # noqa: E402

VIEW_OPS = frozenset(
    {
        "aten::view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::_unsafe_view",
        "aten::as_strided",
        "aten::transpose",
        "aten::t",
        "aten::permute",
        "aten::expand",
        "aten::slice",
        "aten::select",
        "aten::narrow",
        "aten::unsqueeze",
        "aten::unflatten",
        "aten::squeeze",
        "aten::flatten",
        "aten::chunk",
        "aten::split",
        "aten::unbind",
        "aten::detach",
        "aten::alias",
        "aten::lift_fresh",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::empty",
        "aten::empty_strided",
        "aten::result_type",
    }
)
"""aten operators that launch no kernel (views, allocations, metadata): left out of the CPU's proxy count."""
OPERATORS = ("aten::", "mkldnn::")
"""The namespaces of the operators the CPU's proxy counts: aten's, and oneDNN's prepacked bfloat16 matmul
(``mkldnn::_linear_pointwise``, the CPU copy's linear layers)."""
LAUNCHES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaGraphLaunch",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "cudaLaunchCooperativeKernel",
)
"""Prefixes of the CUDA runtime calls that start device work (``host launches``)."""
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")
ROLLOUT_TOKENS = (8, 24)
"""New tokens of the two rollouts whose kernel counts' difference gives the per-token count (multiples of the
sampler's finish-check interval, so both rollouts check as often per token)."""


@dataclass(frozen=True)
class SpecialTokens:
    """The token ids the random models and the sampler read (prompts are token ids already); decoding is not
    timed here."""

    bos_token_id: int = 1
    eos_token_id: int = 2
    pad_token_id: int = 0

    def batch_decode(self, ids: Any, **_: Any) -> list[str]:
        return [""] * len(ids)


def count_events(events: list[Any], cuda: bool) -> dict[str, int]:
    """What a profiled span launched: on CUDA its GPU kernels, memcpys and memsets (device events) and its host
    launches; on the CPU its outermost ``OPERATORS`` (none above them: a compiled region's wrapper is
    not one) less ``VIEW_OPS`` and no-op ``aten::to`` (a cast to the tensor's own dtype calls nothing below it),
    under "kernels"."""
    if not cuda:
        top = [e for e in events if e.name.startswith(OPERATORS) and not _aten_above(e)]
        real = [e for e in top if e.name not in VIEW_OPS and not (e.name == "aten::to" and not e.cpu_children)]
        return {"kernels": len(real), "memcpy": 0, "memset": 0, "launches": 0}
    device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    memcpy = sum(e.name.startswith("Memcpy") for e in device)
    memset = sum(e.name.startswith("Memset") for e in device)
    launches = sum(e.device_type == torch.autograd.DeviceType.CPU and e.name.startswith(LAUNCHES) for e in events)
    return {"kernels": len(device) - memcpy - memset, "memcpy": memcpy, "memset": memset, "launches": launches}


def _aten_above(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(OPERATORS):
            return True
        parent = parent.cpu_parent
    return False


def profiled(fn: Any, cuda: bool) -> dict[str, int]:
    """``count_events`` of one call of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        fn()
        sync(cuda)
    return count_events(prof.events(), cuda)


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def shape_model(name: str, tiny: bool, device: str, layers: int | None = None, tokenizer: Any = None) -> Any:
    """A random-weight model of ``gpu_check_shapes.SHAPES[name]`` (``tiny``: the GPU check's CPU-mode sizes) with
    ``layers`` layers (default the shape's) and ``tokenizer``'s special ids (default ``SpecialTokens``), float32
    master weights, on ``device``, in eval mode."""
    shape = gpu_check_shapes.SHAPES[name]
    model = gpu_check_shapes.random_model(shape, tokenizer or SpecialTokens(), tiny, layers=layers)
    return model.float().to(device).eval()


def prompts(vocab: int, count: int, width: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` random prompts of ``width`` tokens (ids above the special ones), no padding."""
    ids = torch.randint(3, vocab, (count, width), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


def _decoder(model: Any, mode: str, compile_mode: str | None, backend: str) -> Any:
    """The lean decoder of ``model`` stepping in ``mode`` (the other settings as the caller set them); with
    ``compile_mode``, its static step compiled."""
    from grpolab.engine import fast_decode

    with fast_decode_settings({"step_mode": mode}):
        lean = fast_decode.build(model, torch.bfloat16)
    if lean is None:
        raise RuntimeError(f"fast_decode refused the model: {fast_decode.refusal(model)}")
    if compile_mode is not None:
        if not hasattr(lean, "static_step"):
            raise RuntimeError("fast_decode.LeanLlama has no static_step to compile")
        options = {"mode": compile_mode} if backend == "inductor" else {}
        lean.static_step = torch.compile(lean.static_step, backend=backend, **options)
    return lean


def _one_step(lean: Any, logits: torch.Tensor, tokens: int) -> Any:
    """One decoding step of ``lean`` after its prefill (``logits``), as ``rollout.sample`` runs it: the dynamic
    step's forward of the same token each call (the draw runs outside it, in ``rollout``'s loop); the static step's
    forward with its greedy draw inside (``static_decode``: replayed as a CUDA graph in mode "graph"), over the
    bucket its written slots reach."""
    from grpolab.engine import static_decode

    if lean.mode == "dynamic":
        token = logits.argmax(dim=-1)
        return lambda: lean.step(token)
    loop = static_decode.loop_for(lean, tokens, (0.0, 1.0), None, (-1, 0))  # greedy; no token is EOS
    loop._draw(logits)
    drawn = [1]

    def step() -> None:
        loop._advance(lean.bucket_end(loop.width + drawn[0]), drawn[0])
        drawn[0] += 1

    return step


def step_counts(
    model: Any, mode: str, steps: int, compile_mode: str | None = None, backend: str = "inductor",
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Kernels and host launches per decoding step (``count_events``, the mean over ``steps`` profiled steps after
    two warm-up steps), ms per step (``steps`` more, unprofiled), and the path the decoder took; ``settings``:
    ``fast_decode``'s other module settings for the count (``kv_cache``, ``stream``)."""
    with fast_decode_settings(settings or {}):
        return _step_counts(model, mode, steps, compile_mode, backend)


def _step_counts(model: Any, mode: str, steps: int, compile_mode: str | None, backend: str) -> dict[str, Any]:
    cuda = next(model.parameters()).is_cuda
    lean = _decoder(model, mode, compile_mode, backend)
    ids, mask = prompts(model.config.vocab_size, 4)
    tokens = 2 + 2 * steps + 1
    logits = lean.prefill(ids.to(lean.device), mask.to(lean.device), tokens, copies=2)
    one_step = _one_step(lean, logits, tokens)
    for _ in range(2):  # warm-up: the graph's capture, the compiler's first call, cuBLAS handles
        one_step()

    def run() -> None:
        for _ in range(steps):
            one_step()

    counts = profiled(run, cuda)
    sync(cuda)
    started = time.perf_counter()
    run()
    sync(cuda)
    seconds = time.perf_counter() - started
    return {
        **{k: v / steps for k, v in counts.items()},
        "ms_per_step": 1000 * seconds / steps,
        "path": lean.path,
        "fallback": lean.fallback,
    }


def rollout_token_kernels(model: Any) -> float:
    """Kernels (CPU: ``count_events``'s proxy) per new token of ``rollout.sample`` (default path, 4 prompts x 2
    samples): the difference of two rollouts' counts over their difference in tokens (``ROLLOUT_TOKENS``)."""
    from grpolab.engine.rollout import sample

    cuda = next(model.parameters()).is_cuda
    ids, mask = prompts(model.config.vocab_size, 4)

    def rollout(tokens: int) -> None:
        sample(
            model,
            SpecialTokens(),
            ids,
            mask,
            num_samples=2,
            max_new_tokens=tokens,
            dtype="bfloat16",
            generator=torch.Generator().manual_seed(0),
        )

    rollout(ROLLOUT_TOKENS[0])  # warm-up
    short, long = (profiled(lambda t=t: rollout(t), cuda)["kernels"] for t in ROLLOUT_TOKENS)
    return (long - short) / (ROLLOUT_TOKENS[1] - ROLLOUT_TOKENS[0])


BF16_STREAM = {"kv_cache": "bfloat16", "stream": "bfloat16"}
"""The settings of the bfloat16-stream rows (``fast_decode.stream``; it needs the bfloat16 cache)."""


def variants(cuda: bool, compile_mode: str | None) -> dict[str, tuple[str, str | None, dict[str, str]]]:
    """Row name -> (``fast_decode.step_mode``, compile mode, ``fast_decode``'s other settings) of the rows this
    device runs."""
    rows: dict[str, tuple[str, str | None, dict[str, str]]] = {"static eager": ("static", None, {})}
    if cuda:
        rows.update({"graph": ("graph", None, {}), "graph, bf16 stream": ("graph", None, BF16_STREAM)})
    else:
        rows.update({"static eager, bf16 cache": ("static", None, {"kv_cache": "bfloat16"}),
                     "static eager, bf16 stream": ("static", None, BF16_STREAM), "dynamic": ("dynamic", None, {})})
    if compile_mode is not None:
        under_graph = cuda and compile_mode != "reduce-overhead"
        rows[f"compiled {compile_mode}" + (" + graph" if under_graph else "")] = (
            "graph" if under_graph else "static",
            compile_mode,
            {},
        )
    return rows


def variant_row(name: str, models: dict[int, Any], mode: str, compile_mode: str | None, args: Any,
                settings: dict[str, str] | None = None) -> dict[str, Any]:
    """One row: the full model's per-step counts and time, and the per-layer split from the 1- and 2-layer
    models; a compiled row that cannot compile is kept with the reason (``skipped``)."""
    row: dict[str, Any] = {"variant": name, "step_mode": mode, "compile": compile_mode, "settings": settings or {}}
    try:
        counts = {
            layers: step_counts(model, mode, args.steps, compile_mode, args.compile_backend, settings)
            for layers, model in models.items()
        }
    except Exception as error:  # a compiler that is missing or fails is reported on its row
        if compile_mode is None:
            raise
        row["skipped"] = f"torch.compile failed: {type(error).__name__}: {' '.join(str(error).split())[:240]}"
        return row
    full_layers = max(models)
    per_layer = counts[2]["kernels"] - counts[1]["kernels"]
    fixed = counts[1]["kernels"] - per_layer
    row.update(
        counts[full_layers],
        layers=full_layers,
        per_layer=per_layer,
        fixed=fixed,
        predicted=fixed + full_layers * per_layer,
    )
    return row


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every variant's row on the shape ``args.model``, and the rollout's kernels per token."""
    started = time.perf_counter()
    cuda = torch.cuda.is_available() and not args.cpu
    torch.manual_seed(0)
    device = "cuda" if cuda else "cpu"
    full = shape_model(args.model, not cuda, device, layers=None if cuda else 3)  # 3 on the CPU: a real check
    models = {
        1: shape_model(args.model, not cuda, device, layers=1),
        2: shape_model(args.model, not cuda, device, layers=2),
        full.config.num_hidden_layers: full,
    }
    rows = [
        variant_row(name, models, mode, compile_mode, args, settings)
        for name, (mode, compile_mode, settings) in variants(cuda, args.compile).items()
    ]
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "model": args.model,
        "layers": full.config.num_hidden_layers,
        "rows": rows,
        **rollout_row(full),
        "unit": "kernels" if cuda else "operators",
        "seconds": time.perf_counter() - started,
    }


def rollout_row(model: Any) -> dict[str, Any]:
    """``rollout_token_kernels``, or why it could not be counted (the step rows stand without it)."""
    try:
        return {"rollout_kernels_per_token": rollout_token_kernels(model)}
    except Exception as error:  # reported beside the table, not fatal to it
        return {
            "rollout_kernels_per_token": None,
            "rollout_error": f"{type(error).__name__}: {' '.join(str(error).split())[:240]}",
        }


def table(result: dict[str, Any]) -> str:
    unit = result["unit"]
    lines = [
        f"Decoding step of the lean sampler on {result['device']} (torch {result['torch']}): {result['model']}, "
        f"{result['layers']} layers, 8 rows; {unit} per step (CPU: top-level aten and oneDNN operators less views, a "
        f"proxy); {result['seconds']:.1f} s in all.",
        "",
        f"| variant | path | {unit}/step | per layer | fixed | check: fixed + L x per layer | memcpy | memset "
        "| host launches | ms/step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        if "skipped" in row:
            lines.append(f"| {row['variant']} | skipped: {row['skipped']} | | | | | | | | |")
            continue
        path = row["path"] + (f" (fell back: {row['fallback']})" if row["fallback"] else "")
        lines.append(
            f"| {row['variant']} | {path} | {row['kernels']:.0f} | {row['per_layer']:.0f} | "
            f"{row['fixed']:.0f} | {row['predicted']:.0f} | {row['memcpy']:.0f} | {row['memset']:.0f} | "
            f"{row['launches']:.0f} | {row['ms_per_step']:.3f} |"
        )
    per_token = result["rollout_kernels_per_token"]
    short, long = ROLLOUT_TOKENS
    measured = (
        f"{per_token:.1f} {unit} per new token ({long}-token rollout less {short}-token, over {long - short})"
        if per_token is not None
        else f"not counted ({result.get('rollout_error')})"
    )
    lines += ["", f"rollout.sample (default path, sampling loop included): {measured}"]
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="tiny model on the CPU (the test's mode)")
    parser.add_argument(
        "--model",
        default="smollm2-135m-shape",
        choices=sorted(gpu_check_shapes.SHAPES),
        help="the real model whose shape the random weights take",
    )
    parser.add_argument("--steps", type=int, default=4, help="decoding steps profiled (and as many timed)")
    parser.add_argument(
        "--compile",
        choices=COMPILE_MODES,
        default=None,
        help="add a row with the static step compiled by torch.compile in this mode",
    )
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile's backend (the test runs 'eager': the tracing without the compiler)",
    )
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, not {args.steps}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    result = measure(args)
    print_and_save(table(result), result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
