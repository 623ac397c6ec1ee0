"""The ``grpolab`` model backend of lm-eval 0.4: ``--model grpolab --model_args pretrained=RUN_OR_DIR``.

lm-eval's CLI has no plugin mechanism for models (0.4.13 finds them in its own ``MODEL_MAPPING`` and in classes
registered with ``lm_eval.api.registry.register_model`` before it parses its arguments), so ``register()`` adds
this backend and ``python -m grpolab.integrations.lm_eval`` runs lm-eval's command line after calling it.

``pretrained`` is anything ``grpolab.models.load_policy`` loads: a run directory, an exported folder, a local model
folder or the preset ``embedded``. Only ``generate_until`` is supported, with grpolab's sampler
(``grpolab.engine.rollout.sample``): lm-eval calls the backend with each request repeated ``repeats`` times in a
row; the backend samples those ``repeats`` completions of a prompt as one group of independent draws, from one
``torch.Generator`` seeded with ``seed`` for the whole call, prompts in chunks of ``prompts_per_batch`` (64, as
``grpolab.evaluation``). So a run is reproducible, and on a task ``grpolab lm-eval-tasks`` wrote it draws the
completions ``grpolab eval --seed S --n N`` draws for its pass@k (same prompts, settings, seed and chunks).

``until`` stop strings cut each completion at the first one found (the sampler stops at EOS; the text after a stop
string is dropped, which gives the text a stop during sampling would); ``do_sample: false`` or temperature 0 is
greedy. With ``--apply_chat_template`` the context already holds the template's special tokens, so it is encoded
without adding them again (no second BOS). lm-eval's ``batch_size`` is accepted and not used: grpolab's sampler
sizes its memory chunks itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.models.utils import normalize_gen_kwargs

from grpolab import devices
from grpolab.engine.rollout import encode_prompts, fixed_weights, sample
from grpolab.errors import UserError
from grpolab.models import load_policy

__all__ = ["NAME", "GrpolabLM", "cut_at_stop", "register"]

NAME = "grpolab"
"""The backend's name for ``lm_eval --model``."""

_UNSUPPORTED = ("the grpolab lm-eval backend only generates (generate_until tasks, such as those of grpolab "
                "lm-eval-tasks); for {kind} tasks run lm-eval's hf backend on an export: grpolab export RUN --out DIR, "
                "then --model hf --model_args pretrained=DIR")


def cut_at_stop(text: str, until: Sequence[str]) -> str:
    """``text`` up to the earliest of the stop strings ``until`` (all of it when none occurs)."""
    cut = len(text)
    for stop in until:
        if stop:
            found = text.find(stop)
            if found != -1:
                cut = min(cut, found)
    return text[:cut]


def _device(name: str | None) -> torch.device:
    """The device for lm-eval's ``--device`` (default ``cuda:0`` even on a machine without a GPU, where the CPU is
    used with a warning, as lm-eval's ``hf`` backend does); None or ``auto``: a GPU when there is one."""
    if name and name.startswith("cuda") and not torch.cuda.is_available():
        warnings.warn(f"--device {name}: torch sees no CUDA GPU, so the grpolab backend samples on the CPU",
                      stacklevel=2)
        return torch.device("cpu")
    return devices.bind(name or "auto")


def _groups(requests: Sequence[Any]) -> list[tuple[Any, int]]:
    """Each distinct request (lm-eval repeats one ``Instance`` object ``repeats`` times in a row) and how often
    it came, in the order of first appearance."""
    counts: dict[int, list] = {}
    for request in requests:
        entry = counts.setdefault(id(request), [request, 0])
        entry[1] += 1
    return [(request, count) for request, count in counts.values()]


class GrpolabLM(LM):
    """An lm-eval ``LM`` that samples with grpolab's sampler (see the module docstring)."""

    def __init__(self, pretrained: str = "embedded", seed: int = 0, device: str | None = None,
                 prompts_per_batch: int = 64, max_gen_toks: int = 256, batch_size: Any = None,
                 max_batch_size: Any = None, **unknown: Any) -> None:
        super().__init__()
        if unknown:
            raise UserError(f"the grpolab lm-eval backend takes no model_args {', '.join(sorted(unknown))}; it takes "
                            "pretrained, seed, prompts_per_batch and max_gen_toks (the device is lm-eval's --device)")
        self.policy = load_policy(str(pretrained))
        self.policy.model.to(_device(device))
        self.policy.model.eval()
        self.seed, self.prompts_per_batch, self.max_gen_toks = int(seed), int(prompts_per_batch), int(max_gen_toks)
        self.templated = False  # set once lm-eval has put a prompt through the chat template

    @property
    def tokenizer_name(self) -> str:
        return str(self.policy.source).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.policy.tokenizer, "chat_template", None)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if not getattr(self.policy.tokenizer, "chat_template", None):
            raise UserError(f"{self.policy.source} has no chat template; leave out --apply_chat_template")
        self.templated = True
        return self.policy.tokenizer.apply_chat_template(chat_history, tokenize=False,
                                                         add_generation_prompt=add_generation_prompt)

    def encode(self, contexts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """[P, Lp] left-padded ids and mask of lm-eval's contexts: as ``encode_prompts`` encodes plain prompts, and
        without adding special tokens again to contexts the chat template made (``--apply_chat_template``), as
        grpolab encodes a templated prompt."""
        if not self.templated:
            return encode_prompts(self.policy.tokenizer, contexts, use_chat_template=False)
        encoded = self.policy.tokenizer(contexts, padding=True, padding_side="left", add_special_tokens=False,
                                        return_tensors="pt", verbose=False)
        return encoded["input_ids"], encoded["attention_mask"]

    def loglikelihood(self, requests):
        raise NotImplementedError(_UNSUPPORTED.format(kind="loglikelihood (multiple-choice)"))

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError(_UNSUPPORTED.format(kind="loglikelihood_rolling (perplexity)"))

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """One completion per request, in order; a request repeated r times gets r independent samples."""
        generator = torch.Generator().manual_seed(self.seed)
        texts: dict[int, list[str]] = {}
        groups = _groups(requests)
        with fixed_weights(self.policy.model):  # the lean sampler copies the weights once, not per batch
            for start in range(0, len(groups), self.prompts_per_batch):
                chunk = groups[start : start + self.prompts_per_batch]
                for (request, _), completions in zip(chunk, self._sample_chunk(chunk, generator), strict=True):
                    texts[id(request)] = completions
        return [texts[id(request)].pop(0) for request in requests]

    def _settings(self, request: Any) -> tuple[float, float, int, tuple[str, ...]]:
        kwargs = normalize_gen_kwargs(dict(request.args[1]), default_max_gen_toks=self.max_gen_toks)
        temperature = float(kwargs.get("temperature", 0.0)) if kwargs.get("do_sample") else 0.0
        return temperature, float(kwargs.get("top_p") or 1.0), int(kwargs["max_gen_toks"]), tuple(kwargs["until"])

    def _sample_chunk(self, chunk: list[tuple[Any, int]], generator: torch.Generator) -> list[list[str]]:
        """The completions of each (request, repeats) of ``chunk``; prompts with other settings or another number
        of repeats are sampled apart, in order of first appearance."""
        out: list[list[str] | None] = [None] * len(chunk)
        batches: dict[tuple, list[int]] = {}
        for index, (request, repeats) in enumerate(chunk):
            batches.setdefault((*self._settings(request), repeats), []).append(index)
        for (temperature, top_p, budget, until, repeats), indices in batches.items():
            ids, mask = self.encode([chunk[i][0].args[0] for i in indices])
            rollout = sample(self.policy.model, self.policy.tokenizer, ids, mask, num_samples=repeats,
                             max_new_tokens=budget, temperature=temperature, top_p=top_p, generator=generator)
            for row, i in enumerate(indices):
                out[i] = [cut_at_stop(t, until) for t in rollout.texts[row * repeats : (row + 1) * repeats]]
        return out  # type: ignore[return-value]


def register() -> type[GrpolabLM]:
    """Register the backend as ``grpolab`` with lm-eval (once; lm-eval's own models stay registered)."""
    import lm_eval.models  # noqa: F401  (registers lm-eval's models first: its registry loads them only when empty)
    from lm_eval.api.registry import model_registry, register_model

    if NAME not in model_registry:
        register_model(NAME)(GrpolabLM)
    return GrpolabLM
