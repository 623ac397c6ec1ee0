"""The update's geometry, read from each run's saved checkpoints (``RUN/checkpoints/step-N/``): is an
estimator's learning slow (a consistent drift, small steps) or stuck (steps that are mostly noise)?

Per run, from the chain start -> kept checkpoints:

* ``successive_cosine``: the mean cosine between successive updates ΔW_k = W_k - W_{k-1}, beside
  ``successive_noise_cosine``, the value it takes when every gradient is zero-mean i.i.d. noise. That value is
  not 0: AdamW's momentum carries one interval's noise into the next (about 0.71 for intervals of 5 steps at
  β1 = 0.9), so only a cosine above it shows a consistent drift;
* ``update_norm`` ‖W_end - W_start‖ and ``step_update_norm`` (the mean ‖ΔW_k‖);
* ``cross_seed_cosine``: the mean cosine of this run's total update W_end - W_start with each other seed's of
  the same (estimator, G, lr) (similar for all seeds: a shared direction; near 0: noise);
* ``adam_rms_ratio`` ‖m̂‖ / ‖√v̂‖ at the last checkpoint (bias-corrected AdamW moments, over all trainable
  elements), ``adam_noise_floor`` its expected value under zero-mean i.i.d. gradient noise, and
  ``adam_over_floor`` = ratio / floor (near 1: Adam's steps are mostly noise; 1/floor for a constant gradient);
  ``adam_over_floor`` is also given at every kept checkpoint (phase ``step N``), since a run that has learned
  what it can ends with noise-dominated steps even when its early steps were not.

Where W lives: a full fine-tune's W is its trainable parameters, and the start is the run's base model
(``load_policy(config.model)``, as the trainer loads it). Under LoRA, W is the weight-space update of each
adapted module, (lora_alpha / r) · B A; B = 0 at the start, so the start is zero and no start model is
re-created, and the seeds' different random A do not enter the cosines. The Adam ratio is read in the
space Adam works in (the adapters' A and B under LoRA).

The successive cosine under noise: with i.i.d. gradients and v̂ ≈ σ² (each element's scale fixed), the
update of steps (a, b] is lr Σ_{a<t<=b} m̂_t / σ, a linear map of the gradients; in many dimensions the cosine of
two such updates concentrates at their correlation, computed exactly from the maps (``momentum_noise_cosines``;
constant lr and no weight decay assumed).

The noise floor of Adam's ratio: for i.i.d. gradients of mean 0 and variance σ², m_t = (1-β1) Σ_{j<t} β1^j g_{t-j} has
E[m_t²] = σ² (1-β1)(1-β1^{2t})/(1+β1), so the bias-corrected m̂_t = m_t/(1-β1^t) has
E[m̂_t²] = σ² (1-β1)(1+β1^t) / ((1+β1)(1-β1^t)), while E[v̂_t] = σ²; the floor is the square root of their
ratio, sqrt((1-β1)/(1+β1)) for large t, and 1 at t = 1. Departure from the plain mean |m̂|/√v̂ per element:
the ratio of sums ‖m̂‖/‖√v̂‖ is measured because its noise value needs no assumption on the noise's
distribution or on how σ differs between elements (a mean of |m̂|/√v̂ would carry a factor that depends on
both, sqrt(2/π) for Gaussian noise).

Every checkpoint read is first checked against its ``checksums.json`` (``checkpoint_chain``); a damaged one is
refused in one line naming it.

Successive updates need two checkpoints one interval apart: the start -> first kept checkpoint counts only
when no checkpoint before it was pruned (its step is at most ``checkpoint_every``). A run with too few
checkpoints gets NaN rows and a note naming the compare settings that keep enough of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from grpolab.errors import UserError
from grpolab.mechanism.runs import ReportedRun
from grpolab.train.checkpoint import LAYOUT, verify_checkpoint

__all__ = ["MEASURES", "SETTINGS_HINT", "adam_noise_floor", "adam_rms_ratio", "checkpoint_chain", "gram_measures",
           "momentum_noise_cosines", "update_gram", "update_rows"]

MEASURES = ("successive_cosine", "successive_noise_cosine", "cross_seed_cosine", "update_norm", "step_update_norm",
            "adam_rms_ratio", "adam_noise_floor", "adam_over_floor")
SETTINGS_HINT = "rerun the compare with --checkpoint-every 5 --keep-checkpoints 100"


@dataclass(frozen=True)
class Chain:
    """A run's kept checkpoints, oldest first, and whether start -> first is one checkpoint interval."""

    steps: list[int]
    paths: list[Path]
    first_is_regular: bool


def checkpoint_chain(run: ReportedRun) -> Chain:
    """The run's kept checkpoints (directories holding weights.safetensors), oldest first; ``UserError`` naming
    the first one whose files do not match its ``checksums.json`` (a flipped bit, a truncated file): one
    damaged snapshot would change every measure of the run (a flipped exponent bit made ``update_norm`` 2.4e37)."""
    root = run.run_dir / "checkpoints"
    kept = [(step, path) for step, path in LAYOUT.folders(root) if (path / "weights.safetensors").is_file()]
    steps, found = [step for step, _ in kept], [path for _, path in kept]
    for path in found:
        if not verify_checkpoint(path):
            raise UserError(f"checkpoint {path} of run {run.run_id} is damaged (its files do not match its "
                            "checksums.json), so its updates cannot be measured; restore the run from a copy, or "
                            "leave out the updates (--parts without updates)")
    every = run.config.checkpoint_every
    first_is_regular = bool(steps) and (steps[0] <= every if every > 0 else len(steps) == 1)
    return Chain(steps, found, first_is_regular)


# ---------------------------------------------------------------------------------------- weights


def _is_lora(names: Iterable[str]) -> bool:
    return any(".lora_A." in name for name in names)


def _weight_space(tensors: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Checkpoint tensors -> W by name: the tensors themselves, or under LoRA scale · B A per module."""
    if not _is_lora(tensors):
        return {name: t.double() for name, t in tensors.items()}
    out = {}
    for name, a in tensors.items():
        if ".lora_A." in name:
            b = tensors[name.replace(".lora_A.", ".lora_B.")]
            out[name.split(".lora_A.")[0]] = scale * (b.double() @ a.double())  # [out, r] @ [r, in]
    return out


def _read(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    with safe_open(str(path / "weights.safetensors"), "pt") as handle:
        return {name: handle.get_tensor(name) for name in names}


def _lora_scale(run: ReportedRun) -> float:
    return run.config.lora_alpha / run.config.lora_r


def _update_vectors(run: ReportedRun, chain: Chain, names: list[str],
                    start: dict[str, torch.Tensor] | None) -> torch.Tensor:
    """The run's updates [start -> c1, c1 -> c2, ...] restricted to the checkpoint tensors ``names``, each
    flattened: [n_updates, d]. ``start``: the base model's tensors (full fine-tune) or None (LoRA: zero)."""
    snapshots = [_weight_space(_read(path, names), _lora_scale(run)) for path in chain.paths]
    origin = ({k: v.double() for k, v in start.items()} if start is not None
              else {k: torch.zeros_like(v) for k, v in snapshots[0].items()})
    flat = [torch.cat([s[k].flatten() for k in sorted(s)]) for s in [origin, *snapshots]]
    return torch.stack([after - before for before, after in itertools.pairwise(flat)])


def update_gram(runs: list[ReportedRun], chains: list[Chain],
                start: dict[str, torch.Tensor] | None) -> np.ndarray:
    """Gram matrix [N, N] of all the runs' updates (run by run, in chain order), accumulated one checkpoint
    tensor at a time so that only one tensor of every snapshot is held at once."""
    with safe_open(str(chains[0].paths[0] / "weights.safetensors"), "pt") as handle:
        all_names = sorted(handle.keys())
    missing = [] if start is None else [name for name in all_names if name not in start]
    if missing:
        raise UserError(f"checkpoint {chains[0].paths[0]} holds {missing[0]}, which the start model "
                        f"{runs[0].config.model!r} lacks; analyse runs whose saved --model is still available")
    groups = _tensor_groups(all_names)
    total = sum(len(chain.paths) for chain in chains)
    gram = np.zeros((total, total))
    for names in groups:
        base = None if start is None else {name: start[name] for name in names}
        vectors = torch.cat([_update_vectors(run, chain, names, base)
                             for run, chain in zip(runs, chains, strict=True)])
        gram += (vectors @ vectors.T).numpy()
    return gram


def _tensor_groups(names: list[str]) -> list[list[str]]:
    """Checkpoint tensors read together: each tensor alone, or a LoRA module's A and B."""
    if not _is_lora(names):
        return [[name] for name in names]
    return [[name, name.replace(".lora_A.", ".lora_B.")] for name in names if ".lora_A." in name]


# ------------------------------------------------------------------------------------ measures


def _cosine(gram: np.ndarray, i: int, j: int) -> float:
    denominator = np.sqrt(gram[i, i] * gram[j, j])
    return float(gram[i, j] / denominator) if denominator > 0 else float("nan")


def gram_measures(gram: np.ndarray, chains: list[Chain], beta1: float) -> list[dict[str, float]]:
    """Per run: successive_cosine (and its value under noise at Adam's ``beta1``), step_update_norm,
    update_norm and cross_seed_cosine, from the Gram matrix of ``update_gram`` (the runs' update blocks in
    order)."""
    offsets = np.cumsum([0, *(len(chain.paths) for chain in chains)])
    blocks = [range(offsets[i], offsets[i + 1]) for i in range(len(chains))]
    totals = np.array([[gram[np.ix_(a, b)].sum() for b in blocks] for a in blocks])  # <T_r, T_s>
    out = []
    for r, (chain, block) in enumerate(zip(chains, blocks, strict=True)):
        regular = list(block) if chain.first_is_regular else list(block)[1:]
        pairs = [_cosine(gram, i, i + 1) for i in regular[:-1]]
        others = [_cosine(totals, r, s) for s in range(len(chains)) if s != r]
        noise = momentum_noise_cosines(chain.steps, beta1)[(0 if chain.first_is_regular else 1):] if pairs else []
        out.append({"successive_cosine": _mean(pairs), "successive_noise_cosine": _mean(noise),
                    "step_update_norm": _mean([float(np.sqrt(gram[i, i])) for i in regular]),
                    "update_norm": float(np.sqrt(totals[r, r])),
                    "cross_seed_cosine": _mean(others)})
    return out


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def momentum_noise_cosines(steps: list[int], beta1: float) -> list[float]:
    """Expected cosine between the successive updates (0, s1], (s1, s2], ... of bias-corrected AdamW under
    zero-mean i.i.d. gradient noise (module docstring); ``steps``: [s1, s2, ...], increasing."""
    last = steps[-1]
    t = np.arange(1, last + 1)
    lags = t[:, None] - t[None, :]  # m̂_t's weight on g_j: (1-β1) β1^(t-j) / (1-β1^t), j <= t
    weights = np.where(lags >= 0, (1 - beta1) * beta1 ** np.maximum(lags, 0), 0.0) / (1 - beta1 ** t)[:, None]
    bounds = [0, *steps]
    chunks = np.array([[a < step <= b for step in t] for a, b in itertools.pairwise(bounds)], dtype=float)
    maps = chunks @ weights  # [updates, gradients]
    covariance = maps @ maps.T
    norms = np.sqrt(np.diag(covariance))
    return [float(covariance[i, i + 1] / (norms[i] * norms[i + 1])) for i in range(len(steps) - 1)]


def adam_noise_floor(beta1: float, step: int) -> float:
    """‖m̂‖/‖√v̂‖ expected for zero-mean i.i.d. gradients after ``step`` AdamW steps (module docstring)."""
    decay = beta1 ** step
    return float(np.sqrt((1 - beta1) * (1 + decay) / ((1 + beta1) * (1 - decay))))


def adam_rms_ratio(optimizer: dict[str, torch.Tensor], betas: tuple[float, float]) -> tuple[float, int]:
    """(‖m̂‖ / ‖√v̂‖ over every parameter with AdamW state, the largest step count) from ``optimizer_tensors``'
    flat {"<param>/exp_avg", "<param>/exp_avg_sq", "<param>/step"} tensors; (NaN, 0) when there are none."""
    beta1, beta2 = betas
    squared_m = squared_v = 0.0
    last = 0
    for name in (key.removesuffix("/exp_avg") for key in optimizer if key.endswith("/exp_avg")):
        step = int(optimizer[f"{name}/step"].item())
        m_hat = optimizer[f"{name}/exp_avg"].double() / (1 - beta1 ** step)
        v_hat = optimizer[f"{name}/exp_avg_sq"].double() / (1 - beta2 ** step)
        squared_m += float((m_hat ** 2).sum())
        squared_v += float(v_hat.sum())
        last = max(last, step)
    if squared_v <= 0:
        return float("nan"), 0
    return float(np.sqrt(squared_m / squared_v)), last


def _adam_measures(run: ReportedRun, checkpoint: Path) -> dict[str, float]:
    """The Adam ratio, its noise floor and their quotient at one checkpoint of ``run``."""
    with safe_open(str(checkpoint / "optimizer.safetensors"), "pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    ratio, step = adam_rms_ratio(tensors, tuple(run.config.adam_betas))
    floor = adam_noise_floor(run.config.adam_betas[0], step) if step else float("nan")
    return {"adam_rms_ratio": ratio, "adam_noise_floor": floor, "adam_over_floor": ratio / floor}


# --------------------------------------------------------------------------------------- rows


def update_rows(runs: list[ReportedRun], start: dict[str, torch.Tensor] | None) -> tuple[list[dict[str, Any]],
                                                                                          list[str]]:
    """The ``updates`` part of ``grpolab mechanism`` for ``runs`` (all of one comparison): one row per (run,
    measure) with ``value`` (NaN when not measured) and the notes saying what was not measured and why.
    ``start``: the base model's trainable tensors of a full fine-tune, or None under LoRA."""
    chains = [checkpoint_chain(run) for run in runs]
    values: dict[str, dict[str, float]] = {run.run_id: {} for run in runs}
    notes = _chain_notes(runs, chains)
    for key in sorted({(r.estimator, r.group_size, r.lr) for r in runs}, key=str):
        group = [(run, chain) for run, chain in zip(runs, chains, strict=True)
                 if (run.estimator, run.group_size, run.lr) == key and chain.paths]
        if not group:
            continue
        members, member_chains = [g[0] for g in group], [g[1] for g in group]
        gram = update_gram(members, member_chains, start)
        measures = gram_measures(gram, member_chains, members[0].config.adam_betas[0])
        for run, chain, measured in zip(members, member_chains, measures, strict=True):
            values[run.run_id] = {**measured, **_adam_measures(run, chain.paths[-1])}
    rows = []
    for run, chain in zip(runs, chains, strict=True):
        ident = {"run_id": run.run_id, "estimator": run.estimator, "group_size": run.group_size,
                 "seed": run.seed, "lr": run.lr, "part": "updates", "token_class": "", "outcome": "",
                 "phase": "", "k": None}
        rows += [{**ident, "measure": measure, "value": values[run.run_id].get(measure, float("nan"))}
                 for measure in MEASURES]
        rows += [{**ident, "measure": "adam_over_floor", "phase": f"step {step}",
                  "value": _adam_measures(run, path)["adam_over_floor"]}
                 for step, path in zip(chain.steps, chain.paths, strict=True)]
    return rows, notes


def _chain_notes(runs: list[ReportedRun], chains: list[Chain]) -> list[str]:
    notes = []
    for run, chain in zip(runs, chains, strict=True):
        regular = len(chain.paths) - (0 if chain.first_is_regular else 1)
        if not chain.paths:
            notes.append(f"not measured: {run.run_id} has no checkpoint (no update, no Adam state); {SETTINGS_HINT}")
        elif regular < 2:
            kept = ", ".join(str(s) for s in chain.steps)
            notes.append(f"not measured: successive cosine of {run.run_id}, which keeps checkpoints at step(s) "
                         f"{kept} and so fewer than 2 successive updates one interval apart; {SETTINGS_HINT}")
    by_group: dict[tuple, int] = {}
    for run, chain in zip(runs, chains, strict=True):
        key = (run.estimator, run.group_size, run.lr)
        by_group[key] = by_group.get(key, 0) + bool(chain.paths)
    notes += [f"not measured: cross-seed cosine of {e} G={g} lr={lr:g}, which has {n} run(s) with checkpoints "
              "(needs 2 seeds)" for (e, g, lr), n in by_group.items() if n < 2]
    return notes
