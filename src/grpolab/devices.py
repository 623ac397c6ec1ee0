"""Where a run computes, and the one crossing from that device to the host.

``resolve(name)`` turns the ``device`` setting (``auto``, ``cpu``, ``cuda``, ``cuda:N``) into a ``torch.device``,
refusing in one line a device this machine does not have. ``auto`` takes the first GPU torch sees, else the CPU.
``bind(name)`` resolves it and makes it the process's current CUDA device: what a run, an evaluation or a gradient
analysis calls before its model moves there.

``to_host(value)`` is the one deliberate place where a tensor that may live on an accelerator becomes host data
(a CPU tensor, ready for ``numpy()``, ``tolist()`` or ``float()``). Every tensor handed to grpolab by a model, TRL
or verl goes through it before numpy sees it; ``tests/device_tensors.py`` hands grpolab tensors that refuse the
conversion otherwise, as CUDA tensors do, so that the CPU test suite catches a missed crossing.

Nothing here departs from the papers: they say nothing of devices.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import TYPE_CHECKING, Any

from grpolab.errors import UserError

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICE_CHOICES", "bind", "check_name", "compute_autocast", "describe", "model_device", "resolve", "to_host"]

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_NAME = re.compile(r"auto|cpu|cuda(:[0-9]+)?")  # fullmatch: "$" would let "cpu\n" through


def check_name(name: str) -> None:
    """Refuse a ``device`` setting that is none of ``DEVICE_CHOICES`` (no hardware is looked at)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UserError(f"device must be {DEVICE_CHOICES}, got {name!r}")


def resolve(name: str) -> torch.device:
    """The ``torch.device`` of a ``device`` setting on this machine.

    Raises:
        UserError: the name is not one of ``DEVICE_CHOICES``, or it asks for a GPU torch does not see.
    """
    import torch  # here, not at the top: the config's checks import this module, and need no torch

    check_name(name)
    if name == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(name.split(":")[1]) if ":" in name else 0
    if count == 0:
        raise UserError(f"--device {name}: torch sees no CUDA GPU on this machine (torch {torch.__version__}, "
                        f"CUDA build: {torch.version.cuda or 'no'}); use --device cpu or --device auto")
    if index >= count:
        raise UserError(f"--device {name}: torch sees {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}; pick one of "
                        "them (CUDA_VISIBLE_DEVICES renumbers them from 0)")
    return torch.device("cuda", index)


def bind(name: str) -> torch.device:
    """``resolve(name)``, made this process's current CUDA device when it is one: every CUDA call that takes no
    device (a stream, a graph capture, an allocation by ``device="cuda"``) then lands on the run's GPU, not on
    cuda:0, and no context is made on cuda:0 for a run on cuda:N."""
    import torch

    device = resolve(name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def describe(device: torch.device) -> str:
    """``cpu`` or ``cuda:0 (NVIDIA H100 80GB HBM3)``: what a run prints about where it computes."""
    import torch

    if device.type != "cuda":
        return str(device)
    index = 0 if device.index is None else device.index
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def compute_autocast(dtype: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast of a run's forwards with grad under its ``dtype`` setting: bfloat16 autocast on ``device``
    under bfloat16 (the weights stay float32), nothing otherwise: the update's forwards
    (``grpolab.train.forward``) and ``grpolab gradients``' analysis. The training hook's gradient analysis measures
    in float32 (``grpolab.gradients.geometry.gradient_metrics_for_step``)."""
    import torch

    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (the CPU for a model without parameters)."""
    import torch

    for param in model.parameters():
        return param.device
    return torch.device("cpu")


def to_host(value: Any) -> Any:
    """``value`` on the host: a tensor detached and on the CPU (the same tensor when it is already a plain CPU
    tensor); anything else unchanged. Without torch imported, nothing can be a tensor, and torch is not imported
    (the audit of a table of numbers runs without it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_tensor(value):
        return value
    return value.detach().cpu()
