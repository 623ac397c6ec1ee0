"""A whole simulated GPU for the CPU suite: torch says it sees one CUDA device, and a model moved to it holds
``DeviceTensor`` parameters (``device_tensors``), so that grpolab's own engine, evaluation and gradient code run
their real CUDA code path on the CPU and fail where a real GPU would: a numpy conversion without a host crossing,
or an op that mixes the device with a host tensor.

``simulated_gpu(monkeypatch)`` patches, for one test:

* ``torch.cuda.is_available`` (True), ``device_count`` (1), ``get_device_name``, ``mem_get_info`` (the host's
  memory), ``set_device``, ``synchronize``, ``reset_peak_memory_stats`` and ``max_memory_allocated`` (no-ops);
* ``torch.autocast("cuda", ...)``: the CPU's autocast, so that ``--dtype bfloat16`` runs its bfloat16 code path;
* ``nn.Module.to`` / ``cuda`` toward a CUDA device: each parameter and buffer becomes a ``DeviceTensor`` in place
  (a parameter stays the same ``nn.Parameter`` object's slot, so optimisers built after the move see it), and
  toward the CPU: back to plain tensors;
* and enters ``simulated_cuda()``, so ``torch.zeros(..., device="cuda")`` and ``t.to("cuda")`` give
  ``DeviceTensor``s.

What it cannot show: speed, kernels that exist only on CUDA (a fused optimiser runs its CPU kernel), and
numerics of bf16 on a real GPU: the GPU check (scripts/gpu_check.py) and the numbers check
(scripts/gpu_numbers.py) cover those on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import torch
from torch import nn

from device_tensors import DeviceTensor, is_device_tensor, off_device, on_device, simulated_cuda

__all__ = ["simulated_gpu"]

_module_to = nn.Module.to


def _cuda_target(args: tuple, kwargs: dict) -> bool | None:
    """True toward CUDA, False toward the CPU, None when ``Module.to``'s arguments name no device."""
    spec = kwargs.get("device", args[0] if args else None)
    if isinstance(spec, torch.Tensor):
        spec = spec.device
    if isinstance(spec, torch.dtype) or spec is None:
        return None
    kind = torch.device(spec).type if not isinstance(spec, int) else "cuda"
    return kind == "cuda"


def _swap(module: nn.Module, to_gpu: bool) -> None:
    """Every parameter and buffer of ``module`` on the simulated GPU (or back); a parameter shared by two modules
    (tied embeddings) stays one parameter, as ``Module.to`` keeps it."""
    convert = on_device if to_gpu else off_device
    moved: dict[int, nn.Parameter] = {}
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is None or is_device_tensor(param) == to_gpu:
                continue
            if id(param) not in moved:
                moved[id(param)] = nn.Parameter(convert(param.detach()), requires_grad=param.requires_grad)
            sub._parameters[name] = moved[id(param)]
        for name, buffer in list(sub._buffers.items()):
            if buffer is not None and is_device_tensor(buffer) != to_gpu:
                sub._buffers[name] = convert(buffer)


def _patched_to(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
    target = _cuda_target(args, kwargs)
    if target is None:
        return _module_to(self, *args, **kwargs)
    _swap(self, to_gpu=target)
    dtype = kwargs.get("dtype") or next((a for a in args if isinstance(a, torch.dtype)), None)
    return _module_to(self, dtype) if dtype is not None else self


_autocast = torch.autocast


def _autocast_on_the_host(device_type: str, *args: Any, **kwargs: Any) -> torch.autocast:
    """``torch.autocast`` with "cuda" run as the CPU's autocast: the simulated GPU's tensors compute on the host, so
    a run's bfloat16 code path (``--dtype bfloat16``) runs under the CPU's bfloat16 autocast."""
    return _autocast("cpu" if device_type == "cuda" else device_type, *args, **kwargs)


@contextmanager
def simulated_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One simulated CUDA GPU for the duration of the block (see the module docstring)."""
    import psutil

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "simulated GPU")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (psutil.virtual_memory().available,
                                                                 psutil.virtual_memory().total))
    for name in ("set_device", "synchronize", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *_, **__: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *_: 0)
    monkeypatch.setattr(torch, "autocast", _autocast_on_the_host)
    monkeypatch.setattr(nn.Module, "to", _patched_to)
    monkeypatch.setattr(nn.Module, "cuda", lambda self, device=None: _patched_to(self, "cuda"))
    with ExitStack() as stack:
        stack.enter_context(simulated_cuda())
        yield


def on_simulated_gpu(model: nn.Module) -> bool:
    """Whether every parameter of ``model`` is on the simulated GPU."""
    return all(isinstance(p, DeviceTensor) for p in model.parameters())
