"""Several runs on one GPU (``grpolab compare --runs-per-gpu K``): before any run starts, K times one run's
estimated peak GPU memory against the free memory of each GPU the sweep sees, refused in one line.

* ``run_footprint``: what one run's peak depends on (``grpolab.engine.memory.RunFootprint``), read from its model
  as loaded on the host and set up as its engine sets it up (``capabilities.Engine.footprint``: grpolab's
  ``grpolab_footprint``, TRL's ``trl_engine.run.gpu_footprint``), its task's prompts and its settings;
* ``shared_gpu_refusal``: the arithmetic and the line: K x the sum of ``memory.run_peak_parts`` (the sampler
  under its 1/K share of the GPU, ``memory.gpu_sampler_budget``; the update's activations and autocast's weight
  copies included) against the least free memory, naming the estimate part by part (parts of 0 bytes left out),
  the free memory, the K that would fit and the settings to lower;
* ``gpu_free_bytes``: each visible GPU's free memory (``torch.cuda.mem_get_info``), read in a short child process,
  so that the sweep process itself holds no CUDA context (hundreds of MB on each GPU) while its runs train.

The estimate of the arm that needs the most (over ``--vary`` variants and group sizes) is the one checked. The
sweep's own runs are not yet on the GPUs, so what the check sees as used belongs to other processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from grpolab.engine import memory
from grpolab.errors import UserError

__all__ = ["check_shared_gpus", "footprint", "free_bytes_here", "gpu_free_bytes", "grpolab_footprint", "run_footprint",
           "shared_gpu_refusal"]

LOWER = "--group-sizes, --prompts-per-step, --max-new-tokens or --micro-batch-size"
"""The settings that make one run's estimate smaller."""


def run_footprint(config: Any, policy: Any, task: Any) -> memory.RunFootprint:
    """What the peak GPU memory of one run of ``config`` (a ``TrainConfig``) depends on, for its ``policy`` (a
    ``grpolab.models.Policy`` freshly loaded, set up here as the run's engine sets it up: LoRA adapters added) and
    ``task``: the engine's own reading (``capabilities.Engine.footprint``)."""
    from grpolab import capabilities

    return capabilities.engine(config.engine).footprint(config, policy, task)


def grpolab_footprint(config: Any, policy: Any, task: Any) -> memory.RunFootprint:
    """``run_footprint`` of grpolab's engine: its lean sampler's copy of the weights and the KV cache its static
    step keeps on a GPU."""
    from grpolab.engine.rollout import cuda_kv_bytes, lean_copy_bytes

    model = _with_adapters(policy.model, config)
    return footprint(config, model, policy.tokenizer, task, sampler_copy_bytes=lean_copy_bytes(model,
                     config.sampler_dtype), kv_bytes=cuda_kv_bytes(model, config.sampler_dtype),
                     micro_batch=config.micro_batch_size)


def _with_adapters(model: Any, config: Any) -> Any:
    from grpolab.train.lifecycle import wrap_lora

    return wrap_lora(model, config) if config.lora else model


def footprint(config: Any, model: Any, tokenizer: Any, task: Any, *, sampler_copy_bytes: int, kv_bytes: int,
              micro_batch: int) -> memory.RunFootprint:
    """The ``RunFootprint`` of ``model`` (as its engine set it up) under ``config`` for ``task``'s prompts, with what
    the engine decides: its sampler's copy of the weights, its KV cache's bytes a value and its micro-batch."""
    from grpolab.engine.fit import step_lengths

    with warnings.catch_warnings():  # a default max_new_tokens lowered to fit: the run says so itself
        warnings.simplefilter("ignore")
        width, new_tokens = step_lengths(model, tokenizer, task, config, config.max_new_tokens or task.max_new_tokens)
    parameters = list(model.parameters())
    return memory.RunFootprint(
        shape=memory.model_shape(model), weight_bytes=sum(p.numel() * p.element_size() for p in parameters),
        trained=sum(p.numel() for p in parameters if p.requires_grad), sampler_copy_bytes=sampler_copy_bytes,
        reference=config.beta > 0, prompts=config.prompts_per_step, samples=config.group_size, prompt_tokens=width,
        new_tokens=new_tokens, micro_batch=micro_batch, compute_bytes=memory.compute_bytes(config.dtype),
        cast_weight_bytes=memory.autocast_copy_bytes(model, config.dtype), kv_bytes=kv_bytes)


def shared_gpu_refusal(footprints: Sequence[memory.RunFootprint], runs_per_gpu: int, free: int, gpu: str
                       ) -> str | None:
    """The one-line refusal when ``runs_per_gpu`` runs of the largest of ``footprints`` need more than ``free``
    bytes of GPU ``gpu``, else None."""
    budget = memory.gpu_sampler_budget(free, runs_per_gpu)
    parts = max((memory.run_peak_parts(run, budget) for run in footprints), key=lambda found: sum(found.values()))
    one = sum(parts.values())
    if runs_per_gpu * one <= free:
        return None
    fitting = free // one if one else 0
    fix = f"--runs-per-gpu {fitting} fits" if fitting >= 1 else "not even one run fits"
    shown = ", ".join(f"{name} {memory.format_bytes(size)}" for name, size in parts.items() if size)
    return (f"--runs-per-gpu {runs_per_gpu} needs about {runs_per_gpu} x {memory.format_bytes(one)} = "
            f"{memory.format_bytes(runs_per_gpu * one)} of GPU memory (one run: {shown}), but GPU {gpu} has "
            f"{memory.format_bytes(free)} free; lower --runs-per-gpu ({fix}), {LOWER}")


def check_shared_gpus(configs: Sequence[Any], runs_per_gpu: int, free: list[int] | None = None) -> None:
    """Refuse in one line ``runs_per_gpu`` runs of ``configs`` (``TrainConfig``s: a sweep's arms) on each GPU where
    they do not fit the free memory ``free`` of the GPUs this process sees (default: ``gpu_free_bytes``)."""
    from grpolab.sweep.devices import visible_gpu_ids

    if runs_per_gpu <= 1:
        return
    free = gpu_free_bytes() if free is None else free
    if not free:
        return
    least = min(free)
    line = shared_gpu_refusal(_footprints(configs), runs_per_gpu, least, visible_gpu_ids(len(free))[free.index(least)])
    if line is not None:
        raise UserError(line)


def _footprints(configs: Sequence[Any]) -> list[memory.RunFootprint]:
    """``run_footprint`` of each distinct config, each with a policy of its own (LoRA wraps the model in place)
    and its task loaded once per distinct task setting."""
    from grpolab.models import load_policy
    from grpolab.train.lifecycle import load_task_for

    tasks: dict[str, Any] = {}
    found = []
    for config in {repr(config): config for config in configs}.values():
        key = repr((config.task, config.data, config.task_options, config.task_limit, config.eval_split,
                    config.verifier, config.prompt_column, config.reference_column))
        if key not in tasks:
            tasks[key] = load_task_for(config, for_model=False)
        found.append(run_footprint(config, load_policy(config.model), tasks[key]))
    return found


def free_bytes_here() -> list[int]:
    """The free memory of each GPU this process sees (``torch.cuda.mem_get_info``); [] without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [int(torch.cuda.mem_get_info(index)[0]) for index in range(torch.cuda.device_count())]


def gpu_free_bytes() -> list[int]:
    """``free_bytes_here`` read in a child process with this process's ``CUDA_VISIBLE_DEVICES`` and ``sys.path``
    (its CUDA context ends with it); refused in one line when the child fails."""
    path = [entry for entry in sys.path if entry and os.path.isabs(entry)]
    code = ("import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
            "from grpolab.sweep.sharing import free_bytes_here; print(json.dumps(free_bytes_here()))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(path)], capture_output=True, text=True, check=False,
                          timeout=300, env={**os.environ, "PYTHONSAFEPATH": "1"})  # no current folder on sys.path
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--runs-per-gpu: could not read the GPUs' free memory ({last}); use --runs-per-gpu 1")
    return [int(value) for value in json.loads(done.stdout.strip().splitlines()[-1])]
