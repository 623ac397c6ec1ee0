"""grpolab's estimate of one run's peak memory (``grpolab.engine.memory.run_peak_parts``, what ``grpolab compare
--runs-per-gpu K`` checks before any run starts) at real models' shapes, part by part, and its activations against
what autograd saves on this machine.

    python benchmarks/bench_peak_estimate.py [--out benchmarks/results/cpu-DATE/peak-estimate.json]

Two tables, random weights of SmolLM2-135M's and Qwen2.5-0.5B's shapes (``gpu_check_shapes.SHAPES``):

* *The estimate of the GPU check's shape runs* (``scripts/gpu_check.sh``'s ``shape-*`` steps, both engines: task
  ``reverse``, P = 16, G = 8, 128 new tokens, LoRA, bfloat16, micro-batch 64), read as ``compare`` reads it (the
  model as loaded on the host and set up as its engine sets it up on a GPU, the task's prompts in the shape's
  tokenizer), each part in MiB; *before*: the sum as it was counted before the update's activations and
  autocast's weight copies were (the update's logits over T + 1 columns and the sampler's KV cache in float32;
  TRL's run read as grpolab's); *peak*: the peak GPU memory an H200 measured for that run at commit 53cc678,
  read from docs/gpu.md's table (another commit: the comparison is a sanity check, not a measurement of this
  estimate).
* *A layer's activations*: the bytes autograd saves for one decoder layer's backward in the update's forward
  (``memory.saved_tensor_bytes`` of a 2-layer model less a 1-layer one; attention's [N, N] tensors left out, as
  the estimate leaves them out) against ``memory.activation_bytes`` and autocast's copies of a layer's weights,
  over the tokens the forward takes: 2 groups of 8 completions of 128 tokens behind 8-token prompts, the real
  hidden sizes, a 1,024-token vocabulary (the head cancels in the difference). On the CPU: which tensors are saved
  depends on the forward's code and PyTorch's kernels, so a GPU's share can differ (flash attention keeps less).

``tests/engine/test_update_activations.py`` runs ``layer_share`` on tiny models; ``tests/test_peak_estimate.py``
checks docs/benchmarks.md's numbers against the committed result.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "src", ROOT / "scripts", ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

from _common import machine, print_and_save  # noqa: E402

SHAPE_RUN = {"task": "reverse", "advantage": "sign", "lora": True, "lr": 1e-4, "steps": 3, "group_size": 8,
             "prompts_per_step": 16, "max_new_tokens": 128, "eval_limit": 8, "eval_samples": 2,
             "eval_start": False, "dtype": "bfloat16", "checkpoint_every": 0, "progress": False}
"""The GPU check's shape runs (``gpu_check_runner.Check.spec`` with ``gpu_check_setup``'s GPU sizes)."""
PEAK_COMMIT = "53cc678"
LAYER_CASES = [(True, "bfloat16"), (True, "float32"), (False, "bfloat16")]
"""(LoRA, dtype) of the layer table's rows."""
MIB = 2**20


def _batch(groups: int, samples: int, prompt: int, new: int, vocab: int) -> Any:
    from grpolab.train.batch import StepBatch

    generator = torch.Generator().manual_seed(1)
    rows = groups * samples
    prompts = torch.randint(1, vocab, (groups, prompt), generator=generator).repeat_interleave(samples, dim=0)
    return StepBatch(problems=[], prompt_ids=prompts, prompt_mask=torch.ones(rows, prompt, dtype=torch.long),
                     completion_ids=torch.randint(1, vocab, (rows, new), generator=generator),
                     completion_mask=torch.ones(rows, new, dtype=torch.long), rewards=None, texts=[""] * rows,
                     truncated=torch.zeros(rows, dtype=torch.bool), entropy=torch.zeros(rows, new))


def layer_share(build: Callable[[int], torch.nn.Module], config: Any, *, groups: int, samples: int, prompt: int,
                new: int) -> dict[str, Any]:
    """A decoder layer's saved bytes in the update's forward (``policy_logprobs``) of ``groups`` x ``samples``
    full-length completions of ``new`` tokens behind ``prompt``-token prompts, measured (``build(1)`` and
    ``build(2)``: the model with 1 and 2 layers; LoRA added as ``config`` says) and estimated: ``lower`` over
    ``memory.update_tokens`` (what the memory check counts), ``forwarded`` over the tokens the path forwards;
    ``packed``: whether the path is prefix packing."""
    from grpolab.engine import memory, prefix_packing
    from grpolab.train.forward import policy_logprobs
    from grpolab.train.lifecycle import wrap_lora

    rows = list(range(groups * samples))
    measured, copies = [], []
    for layers in (1, 2):
        model = build(layers)
        if config.lora:
            model = wrap_lora(model, config)
        batch = _batch(groups, samples, prompt, new, memory.model_shape(model).vocab)
        packed = prefix_packing.logprobs(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                         batch.completion_mask) is not None
        longest = prompt + samples * new if packed else prompt + new
        measured.append(memory.saved_tensor_bytes(lambda model=model, batch=batch: policy_logprobs(
            model, batch, rows, config), model, square=longest))
        copies.append(memory.autocast_copy_bytes(model, config.dtype))
    one_layer = memory.ModelShape(**{**memory.model_shape(model).__dict__, "layers": 1})
    values = memory.compute_bytes(config.dtype)
    counted = memory.update_tokens(len(rows), samples, prompt, new)
    forwarded = counted if packed else len(rows) * (prompt + new)
    per_layer = copies[1] - copies[0]
    return {"measured": measured[1] - measured[0], "packed": packed, "tokens": forwarded,
            "lower": memory.activation_bytes(one_layer, counted, values) + per_layer,
            "forwarded": memory.activation_bytes(one_layer, forwarded, values) + per_layer}


def _shape_model(name: str, layers: int) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    import gpu_check_shapes

    shape = gpu_check_shapes.SHAPES[name]
    sizes = {key: shape[key] for key in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                         "intermediate_size", "rope_theta", "rms_norm_eps")}
    config_class = LlamaConfig if shape["architecture"] == "llama" else Qwen2Config
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config_class(vocab_size=1024, num_hidden_layers=layers,
                                                         tie_word_embeddings=True, pad_token_id=0, **sizes))


def layer_rows() -> list[dict[str, Any]]:
    """The layer table: each shape x ``LAYER_CASES``."""
    import gpu_check_shapes
    from grpolab.config import TrainConfig

    rows = []
    for name in gpu_check_shapes.SHAPES:
        for lora, dtype in LAYER_CASES:
            config = TrainConfig(lora=lora, dtype=dtype)
            share = layer_share(lambda layers, name=name: _shape_model(name, layers), config, groups=2, samples=8,
                                prompt=8, new=128)
            rows.append({"model": name, "lora": lora, "dtype": dtype, **share})
    return rows


def gpu_peaks(text: str) -> dict[tuple[str, str], float]:
    """The peak GPU memory (MiB) of each (engine, model) shape run in docs/gpu.md's performance table."""
    found = re.findall(r"^\| (grpolab|trl) \| ([\w.-]+-shape) \|[^\n]*\| (\d+) \| PASS \|$", text,
                       flags=re.MULTILINE)
    return {(engine, model): float(peak) for engine, model, peak in found}


def estimate_rows(work: Path) -> list[dict[str, Any]]:
    """The estimate table: each shape's model saved in ``work`` as the GPU check saves it."""
    import gpu_check_shapes
    from grpolab.config import TrainConfig
    from grpolab.engine import memory
    from grpolab.models import load_policy
    from grpolab.sweep.sharing import run_footprint
    from grpolab.train.lifecycle import load_task_for

    peaks = gpu_peaks((ROOT / "docs" / "gpu.md").read_text())
    rows = []
    for name in gpu_check_shapes.SHAPES:
        folder = work / name
        if not (folder / "config.json").is_file():
            gpu_check_shapes.save_random_model(name, folder, cpu=False)
        for engine in ("grpolab", "trl"):
            config = TrainConfig(engine=engine, model=str(folder), device="cuda", **SHAPE_RUN)
            with _as_on_cuda():
                run = run_footprint(config, load_policy(config.model), load_task_for(config, for_model=False))
            budget = memory.gpu_sampler_budget(80 * 2**30)
            parts = memory.run_peak_parts(run, budget)
            if engine == "grpolab":  # the old count read every engine's run as grpolab's
                old = memory.run_peak_parts(memory.RunFootprint(**{**run.__dict__, "compute_bytes": 4,
                                                                   "kv_bytes": 4}), budget)
                micro = min(run.micro_batch, run.prompts * run.samples)
                old["update"] = 2 * micro * (run.new_tokens + 1) * run.shape.vocab * 4  # it counted T + 1 columns
                before = sum(old.values()) - old["activations"] - old["autocast copies"]
            rows.append({"engine": engine, "model": name, "prompt_tokens": run.prompt_tokens,
                         "new_tokens": run.new_tokens, "parts_mib": {part: size / MIB for part, size in parts.items()},
                         "total_mib": sum(parts.values()) / MIB, "before_mib": before / MIB,
                         "peak_mib": peaks.get((engine, name))})
    return rows


@contextlib.contextmanager
def _as_on_cuda() -> Iterator[None]:
    """TRL's engine set up as on a CUDA device (``loads_bfloat16_weights`` reads the run's device) on any machine."""
    import grpolab.train.trl_engine.run as trl_run

    saved = trl_run.loads_bfloat16_weights
    trl_run.loads_bfloat16_weights = lambda config: config.lora and config.dtype == "bfloat16"
    try:
        yield
    finally:
        trl_run.loads_bfloat16_weights = saved


def table(estimates: list[dict[str, Any]], layers: list[dict[str, Any]]) -> str:
    parts = list(estimates[0]["parts_mib"]) if estimates else []
    lines = [f"One run's peak estimate (MiB), the GPU check's shape runs; peak: H200 at {PEAK_COMMIT} (docs/gpu.md)",
             "", "| engine | model | Lp | " + " | ".join(parts) + " | total | before | peak | total / peak |",
             "|---|---|---|" + "---|" * (len(parts) + 4)]
    for row in estimates:
        peak = row["peak_mib"]
        ratio = f"{row['total_mib'] / peak:.2f}" if peak else "n/a"
        lines.append(f"| {row['engine']} | {row['model']} | {row['prompt_tokens']} | "
                     + " | ".join(f"{row['parts_mib'][part]:,.0f}" for part in parts)
                     + f" | {row['total_mib']:,.0f} | {row['before_mib']:,.0f} | "
                     + (f"{peak:,.0f}" if peak else "n/a") + f" | {ratio} |")
    lines += ["", "A layer's activations: saved by autograd (this CPU) and estimated, KiB",
              "", "| model | LoRA | dtype | path | tokens | saved | estimate | estimate / saved |",
              "|---|---|---|---|---|---|---|---|"]
    for row in layers:
        lines.append(f"| {row['model']} | {'yes' if row['lora'] else 'no'} | {row['dtype']} | "
                     f"{'prefix packing' if row['packed'] else 'transformers'} | {row['tokens']:,} | "
                     f"{row['measured'] / 1024:,.0f} | {row['forwarded'] / 1024:,.0f} | "
                     f"{row['forwarded'] / row['measured']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the result here as JSON (and the table beside it as .md)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/grpolab-bench-peak-estimate"),
                        help="where the real-shape models are saved (reused when there)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    estimates, layers = estimate_rows(args.work), layer_rows()
    text = table(estimates, layers)
    print_and_save(text, {"machine": machine(), "estimates": estimates, "layers": layers}, args.out)
    if args.out:
        args.out.with_suffix(".md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
