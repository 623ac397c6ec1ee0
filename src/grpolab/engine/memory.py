"""How much memory sampling and the update need, how much this process may still use, and the one-line
refusal when a setting cannot fit.

The estimates count the tensors that grow with the settings, not the model's weights or Python's overhead:

* the KV cache: layers x 2 (keys, values) x heads_kv x head_dim x dtype bytes x rows x length (the lean
  sampler's dynamic (CPU) step keeps it in float32 whatever the weights; its static (CUDA) step in bfloat16 where
  the weights are bfloat16, ``fast_decode.LeanLlama.kv_dtype``, ``rollout.cuda_kv_bytes``; the prompts' own cache
  of the prefill is float32);
* the prefill's attention: prompts x heads x Lp x Lp float32 scores (three live copies: bias, scores, softmax);
* the sampler's logits: rows x vocab float32 (four live copies: logits, log-probs, probs, their CDF);
* the update's logits: micro-batch x T x vocab in the compute dtype (two live copies: the logits and their
  gradient, ``update_bytes``);
* the activations the update's backward needs (``activation_bytes``): per token and layer at least the two norms'
  inputs (2 x hidden), attention's queries, keys, values and output (2 x (heads + kv_heads) x head_dim) and
  the MLP's inputs to its activation and product (3 x intermediate for a gated MLP, 1 x for a plain one), in the
  compute dtype, over the tokens one micro-batch forwards (``update_tokens``: each group's prompt once, as prefix
  packing forwards it, and every completion at the length cap). Left out: attention's scores (some kernels keep
  them, flash attention does not), the float32 copies autocast keeps of the norms, and the LoRA adapters' small
  products;
* under bfloat16 autocast over float32 weights, the bfloat16 copy of each matmul weight that the backward keeps
  (``autocast_copy_bytes``: one a weight, whether it trains or not).

``tests/engine/test_update_activations.py`` checks the last two against what autograd saves on this CPU, on each
forward path (prefix packing and the transformers forward; LoRA and full; float32 and bfloat16): the estimate
stays below what is saved and above a fixed share of it. ``tests/engine/test_update_memory.py`` checks the update's
three together against the resident memory one micro-batch's forward and backward add.

These leave out the weights and the optimizer state, so they are a lower bound of the peak: a setting they refuse
cannot fit, while one they pass may still run out (the command line then names the settings to lower). They exist
to refuse a setting that needs 100 GB on a machine with 24, in one line before anything is allocated, not to pack
memory tight. What "available" means: the least of the physical memory not in use (``psutil``'s ``available``
when installed, else ``MemAvailable`` of /proc/meminfo, else ``os.sysconf``'s free pages), the room left under the
cgroup's limit (containers), and the room left under the address-space limit (``ulimit -v``).

One run's peak on a GPU (``run_peak_parts``, what ``grpolab compare --runs-per-gpu K`` multiplies by K before
any run starts) adds what they leave out: the weights as loaded (a second copy with a frozen reference model),
``OPTIMIZER_BYTES_PER_PARAMETER`` for each trained parameter (LoRA adapters or all weights) and the lean
sampler's copy of the weights in its dtype, to the step's sampling (chunked under the sampler's budget, the rows'
cache in the dtype the GPU's static step keeps it, ``rollout.cuda_kv_bytes``), its batch and one micro-batch of the
update. K runs on one GPU each sample under 1/K of the sampler's share
(``RUNS_PER_GPU_ENV``, ``sampler_budget``).
"""

from __future__ import annotations

import contextlib
import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpolab.errors import UserError

__all__ = ["GPU_SAMPLER_SHARE", "OPTIMIZER_BYTES_PER_PARAMETER", "RUNS_PER_GPU_ENV", "SAMPLER_BUDGET_BYTES",
           "ModelShape", "RunFootprint", "activation_bytes", "autocast_copy_bytes", "available_bytes", "batch_bytes",
           "chunked_sampling_bytes", "compute_bytes", "context_length", "format_bytes", "gpu_sampler_budget",
           "kv_cache_bytes", "model_shape", "refuse_unless_fits", "run_peak_parts", "runs_sharing_gpu",
           "sampler_budget", "sampling_bytes", "saved_tensor_bytes", "update_bytes", "update_tokens"]

SAMPLER_BUDGET_BYTES = 1 << 30
"""The most memory one sampling pass may use on the host (``sampling_bytes``); a batch that needs more is sampled
in chunks of prompts, with the same result (``rollout.sample``). On a GPU: ``sampler_budget``."""
GPU_SAMPLER_SHARE = 0.25
"""The share of a GPU's available memory (``available_bytes``) one sampling pass may use: the rest is left to the
update's activations, the optimiser and a second run on the same GPU; K runs on one GPU (``RUNS_PER_GPU_ENV``)
take 1/K of it each."""
RUNS_PER_GPU_ENV = "GRPOLAB_RUNS_PER_GPU"
"""The environment variable that tells a run how many runs share its GPU (``grpolab compare --runs-per-gpu`` sets
it in each worker's environment); unset: 1."""
OPTIMIZER_BYTES_PER_PARAMETER = 12
"""Bytes a trained parameter adds: its float32 gradient and AdamW's two float32 moments."""
BATCH_BYTES_PER_TOKEN = 48
"""Bytes per token of a step's [B, Lp + T] batch: ids, masks, log-probs, entropies and advantages."""

_FLOAT = 4


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a causal LM that the estimates need (read from its config)."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    context: int | None
    intermediate: int = 0
    """The MLP's inner width (0: unknown, its activations then left out of ``activation_bytes``)."""
    gated: bool = False
    """Whether the MLP is gated (a gate and an up projection, as in Llama), which saves 3 x ``intermediate``
    values a token for the backward instead of 1."""


_GATES = frozenset({"gate_proj", "gate_up_proj"})
"""Module names of a gated MLP's gate (Llama, Qwen, Mistral, Gemma; fused in Phi-3)."""


def _config(model: Any) -> Any:
    get_base = getattr(model, "get_base_model", None)  # under a peft wrapper
    base = get_base() if callable(get_base) else model
    return getattr(base, "config", None)


def context_length(model: Any) -> int | None:
    """The most tokens (prompt and completion) the model's positions were trained for, or None if unknown."""
    config = _config(model)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def model_shape(model: Any) -> ModelShape:
    """The ``ModelShape`` of a transformers causal LM (bare or under peft)."""
    config = _config(model)
    text = getattr(config, "text_config", None) or config
    hidden = int(getattr(text, "hidden_size", 0) or getattr(text, "n_embd", 0) or 0)
    heads = int(getattr(text, "num_attention_heads", 0) or getattr(text, "n_head", 0) or 1)
    kv_heads = int(getattr(text, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(text, "head_dim", 0) or hidden // heads)
    layers = int(getattr(text, "num_hidden_layers", 0) or getattr(text, "n_layer", 0) or 0)
    intermediate = int(getattr(text, "intermediate_size", 0) or getattr(text, "n_inner", 0) or 0)
    if not intermediate and getattr(text, "model_type", "") == "gpt2":
        intermediate = 4 * hidden  # GPT-2's n_inner=None
    gated = any(name.rsplit(".", 1)[-1] in _GATES for name, _ in model.named_modules())
    return ModelShape(layers, heads, kv_heads, head_dim, hidden, int(getattr(text, "vocab_size", 0) or 0),
                      context_length(model), intermediate, gated)


def kv_cache_bytes(shape: ModelShape, rows: int, length: int, dtype_bytes: int = _FLOAT) -> int:
    """Bytes of a KV cache of ``rows`` sequences of ``length`` tokens."""
    return shape.layers * 2 * shape.kv_heads * shape.head_dim * dtype_bytes * rows * length


def sampling_bytes(shape: ModelShape, prompts: int, samples: int, prompt_tokens: int, new_tokens: int,
                   kv_dtype_bytes: int = _FLOAT) -> int:
    """Bytes one sampling pass of ``prompts`` x ``samples`` rows of ``prompt_tokens`` + ``new_tokens`` needs:
    the rows' KV cache (``kv_dtype_bytes`` a value), the prompts' own float32 cache and prefill attention, the
    logits, the sampled outputs and the uniforms drawn for them."""
    rows = prompts * samples
    cache = (kv_cache_bytes(shape, rows, prompt_tokens + new_tokens, kv_dtype_bytes)
             + kv_cache_bytes(shape, prompts, prompt_tokens))
    prefill = 3 * prompts * shape.heads * prompt_tokens**2 * _FLOAT
    logits = 4 * rows * shape.vocab * _FLOAT
    outputs = rows * new_tokens * (8 + _FLOAT + _FLOAT + _FLOAT)  # token ids, entropies, log-probs, uniforms
    return cache + prefill + logits + outputs


def chunked_sampling_bytes(shape: ModelShape, prompts: int, samples: int, prompt_tokens: int, new_tokens: int,
                           budget: int, kv_dtype_bytes: int = _FLOAT) -> int:
    """``sampling_bytes`` of the largest chunk of ``prompts`` that ``rollout.sample`` samples at once under
    ``budget`` bytes (at least one prompt), its rows' cache ``kv_dtype_bytes`` a value."""
    one = sampling_bytes(shape, 1, samples, prompt_tokens, new_tokens, kv_dtype_bytes)
    chunk = max(1, min(prompts, budget // max(one, 1)))
    return sampling_bytes(shape, chunk, samples, prompt_tokens, new_tokens, kv_dtype_bytes)


def update_bytes(shape: ModelShape, micro_batch: int, new_tokens: int, dtype_bytes: int = _FLOAT) -> int:
    """Bytes the head of one micro-batch of the update needs at least: its completion logits and their gradient,
    ``dtype_bytes`` a value (the compute dtype's: 2 under bfloat16 autocast)."""
    return 2 * micro_batch * new_tokens * shape.vocab * dtype_bytes


def update_tokens(micro_batch: int, samples: int, prompt_tokens: int, new_tokens: int) -> int:
    """The fewest tokens one micro-batch of ``micro_batch`` completions of ``new_tokens`` forwards at the length
    cap: each completion, and the prompt of each of the groups (of ``samples`` rows) it holds once, as prefix
    packing forwards it (the padded forward of other models forwards each row's prompt)."""
    return micro_batch * new_tokens + -(-micro_batch // max(samples, 1)) * prompt_tokens


def activation_bytes(shape: ModelShape, tokens: int, dtype_bytes: int = _FLOAT) -> int:
    """Bytes autograd keeps at least for the backward of a forward of ``tokens`` tokens through the decoder layers,
    ``dtype_bytes`` a value; the module docstring says what a layer saves and what is left out."""
    attention = 2 * shape.heads * shape.head_dim + 2 * shape.kv_heads * shape.head_dim  # q, output; k, v
    mlp = (3 if shape.gated else 1) * shape.intermediate
    return tokens * shape.layers * (2 * shape.hidden + attention + mlp) * dtype_bytes


def compute_bytes(dtype: str) -> int:
    """Bytes of a value in the update's compute dtype (the ``dtype`` setting: bfloat16 runs under autocast)."""
    return 2 if dtype == "bfloat16" else _FLOAT


def autocast_copy_bytes(model: Any, dtype: str) -> int:
    """Bytes of the bfloat16 copies bfloat16 autocast makes of ``model``'s float32 matmul weights (every 2-D weight
    but the embeddings'; a tied head counted once), which the backward keeps; 0 under float32 (no autocast)."""
    if dtype != "bfloat16":
        return 0
    import torch

    weights: dict[int, int] = {}
    for module in model.modules():
        weight = module.__dict__.get("_parameters", {}).get("weight")
        if (weight is not None and weight.dim() == 2 and weight.dtype == torch.float32
                and not isinstance(module, torch.nn.Embedding)):
            weights[weight.data_ptr()] = weight.numel()
    return 2 * sum(weights.values())


def batch_bytes(rows: int, tokens: int) -> int:
    """Bytes of a step's batch of ``rows`` sequences of ``tokens`` (prompt and completion) tokens."""
    return rows * tokens * BATCH_BYTES_PER_TOKEN


@dataclass(frozen=True)
class RunFootprint:
    """What one training run's peak GPU memory depends on (``run_peak_parts``)."""

    shape: ModelShape
    weight_bytes: int
    """Bytes of the model's weights as loaded (every parameter in its dtype, LoRA adapters included)."""
    trained: int
    """Parameters the optimizer updates: the LoRA adapters', or every weight."""
    sampler_copy_bytes: int
    """Bytes of the lean sampler's copy of the weights in its dtype (0 where it samples from the weights)."""
    reference: bool
    """Whether a frozen reference model (a KL penalty) holds a second copy of the weights."""
    prompts: int
    """P: prompts per step."""
    samples: int
    """G: completions per prompt."""
    prompt_tokens: int
    """The longest prompt, in tokens."""
    new_tokens: int
    """The completion length cap."""
    micro_batch: int
    """Sequences per forward/backward pass of the update."""
    compute_bytes: int = _FLOAT
    """Bytes of a value in the update's compute dtype (``compute_bytes``)."""
    cast_weight_bytes: int = 0
    """Bytes of autocast's copies of the weights (``autocast_copy_bytes``)."""
    kv_bytes: int = _FLOAT
    """Bytes of a value of the sampler's KV cache on the GPU (``rollout.cuda_kv_bytes``)."""


def run_peak_parts(run: RunFootprint, budget: int) -> dict[str, int]:
    """Bytes of one run's peak on its device, part by part (the module docstring says what is counted); the
    sampler samples under ``budget`` bytes. Their sum is the estimate."""
    rows = run.prompts * run.samples
    micro = min(run.micro_batch, rows)
    tokens = update_tokens(micro, run.samples, run.prompt_tokens, run.new_tokens)
    return {
        "weights": run.weight_bytes * (2 if run.reference else 1),
        "optimizer": run.trained * OPTIMIZER_BYTES_PER_PARAMETER,
        "sampler copy": run.sampler_copy_bytes,
        "sampling": chunked_sampling_bytes(run.shape, run.prompts, run.samples, run.prompt_tokens, run.new_tokens,
                                           budget, run.kv_bytes),
        "batch": batch_bytes(rows, run.prompt_tokens + run.new_tokens),
        "update": update_bytes(run.shape, micro, run.new_tokens, run.compute_bytes),
        "activations": activation_bytes(run.shape, tokens, run.compute_bytes),
        "autocast copies": run.cast_weight_bytes,
    }


def format_bytes(count: float) -> str:
    """``1.5 GiB``, ``320 MiB``, ``12 KiB``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{int(count)} B"


def _physical_available() -> int | None:
    with contextlib.suppress(ImportError):
        import psutil

        return int(psutil.virtual_memory().available)
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemAvailable"))
        return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return None


def _read_number(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    return None


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup memory limit (v2, else v1), or None without a limit."""
    with contextlib.suppress(OSError, IndexError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            if hierarchy == "0":  # cgroup v2
                folder = Path("/sys/fs/cgroup") / path.lstrip("/")
                limit, used = _read_number(folder / "memory.max"), _read_number(folder / "memory.current")
            elif "memory" in controllers.split(","):
                folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
                limit = _read_number(folder / "memory.limit_in_bytes")
                used = _read_number(folder / "memory.usage_in_bytes")
            else:
                continue
            if limit is not None and used is not None and limit < 1 << 60:
                return max(limit - used, 0)
    return None


def _address_space_room() -> int | None:
    """Bytes left under ``RLIMIT_AS`` (``ulimit -v``), or None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    with contextlib.suppress(OSError, ValueError, StopIteration):
        line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize"))
        return max(soft - int(line.split()[1]) * 1024, 0)
    return soft


def available_bytes(device: Any = None) -> int | None:
    """Bytes this process may still allocate: on a CUDA ``device``, the GPU's free memory and the blocks PyTorch's
    allocator holds unused (it hands them out before asking the driver); else the least of the
    physical memory available, the room under the cgroup limit and the room under ``ulimit -v``; None when none
    of them can be read."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # PyTorch's, free to reuse
        return int(torch.cuda.mem_get_info(device)[0]) + max(int(cached), 0)
    rooms = [room for room in (_physical_available(), _cgroup_room(), _address_space_room()) if room is not None]
    return min(rooms) if rooms else None


def sampler_budget(device: Any = None, reusable: int = 0) -> int:
    """The most memory one sampling pass may use where the model is: ``SAMPLER_BUDGET_BYTES`` on the host; on a
    CUDA ``device``, ``gpu_sampler_budget`` of its available memory (``available_bytes``) plus the ``reusable``
    bytes the sampler keeps from its last pass (its KV cache, counted as free so that the budget does not shrink
    from one rollout to the next), for the runs that share it (``runs_sharing_gpu``)."""
    if device is None or getattr(device, "type", "cpu") != "cuda":
        return SAMPLER_BUDGET_BYTES
    return gpu_sampler_budget((available_bytes(device) or 0) + reusable, runs_sharing_gpu())


def gpu_sampler_budget(available: int, runs: int = 1) -> int:
    """The sampler's budget of each of ``runs`` runs on a GPU with ``available`` bytes: their 1/``runs`` of
    ``GPU_SAMPLER_SHARE`` of it, and never less than the host's budget (P = 64 x G = 8 rows of SmolLM2-135M at 512
    tokens fit one pass on an 80 GB GPU, where the host's 1 GiB split them into four)."""
    return max(SAMPLER_BUDGET_BYTES, int(GPU_SAMPLER_SHARE * available) // max(runs, 1))


def runs_sharing_gpu(environ: Any = None) -> int:
    """How many runs share this process's GPU: ``RUNS_PER_GPU_ENV`` of ``environ`` (default: this process's
    environment), 1 when unset.

    Raises:
        UserError: the variable holds anything but a whole number >= 1.
    """
    text = (os.environ if environ is None else environ).get(RUNS_PER_GPU_ENV, "").strip()
    if not text:
        return 1
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"{RUNS_PER_GPU_ENV} must be a whole number >= 1 (the runs sharing this GPU, which grpolab "
                        f"compare --runs-per-gpu sets), got {text!r}; unset it")
    return int(text)


def refuse_unless_fits(need: int, what: str, lower: str, available: int | None = None, device: Any = None) -> None:
    """Raise a one-line ``UserError`` when ``need`` bytes exceed the memory available.

    Args:
        need: the estimate, in bytes.
        what: what needs it, e.g. ``sampling 16 prompts x 100000 completions of up to 80 tokens``.
        lower: the settings that would make it smaller, e.g. ``--group-size or --max-new-tokens``.
        available: the bytes available (default: ``available_bytes(device)``).
        device: where it is allocated (default: the host).
    """
    on_gpu = getattr(device, "type", "cpu") == "cuda"
    if available is None:
        available = available_bytes(device) if on_gpu else available_bytes()
    where = f"GPU memory ({device})" if on_gpu else "memory"
    if available is not None and need > available:
        raise UserError(f"{what} needs about {format_bytes(need)} of {where}, but only {format_bytes(available)} "
                        f"is available; lower {lower}")


def saved_tensor_bytes(forward: Any, model: Any, *, square: int | None = None) -> int:
    """Bytes of the tensors autograd saves for the backward while ``forward()`` runs: each storage once (views
    share theirs), ``model``'s parameters left out; with ``square``, also every tensor whose last two sizes are
    both ``square`` (attention's scores and masks over a sequence of that length, which ``activation_bytes``
    leaves out). What ``activation_bytes`` and ``autocast_copy_bytes`` are checked against."""
    import torch

    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        scores = square is not None and tensor.dim() >= 2 and tuple(tensor.shape[-2:]) == (square, square)
        if pointer and pointer not in parameters and not scores:
            saved[pointer] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(saved.values())
