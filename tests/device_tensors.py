"""Tensors that behave like CUDA tensors on a CPU-only machine, so that the CPU suite catches a missed host crossing.

On a GPU, a tensor that grpolab gets from a model, TRL or verl lives on ``cuda:0``: ``np.asarray`` and ``.numpy()``
refuse it, and an op that mixes it with a CPU tensor fails. On the CPU every tensor converts, so a test run there
cannot see such a fault. ``DeviceTensor`` is a CPU tensor (a ``torch.Tensor`` subclass, through
``__torch_function__``) that refuses what a CUDA tensor refuses:

* every torch op on it returns a ``DeviceTensor`` again (the result stays "on the device"): arithmetic, reductions,
  indexing, ``view``, ``reshape``, ``to(dtype)``, ``clone``, ``detach``, in-place ops, autograd;
* ``.cpu()``, ``.to("cpu")`` and ``.to(torch.device("cpu"))`` return a plain ``torch.Tensor``, a copy, as the
  crossing to the host copies on CUDA; ``.cuda()`` and ``.to(<a cuda device>)`` keep it a ``DeviceTensor``;
* ``.numpy()`` and ``np.asarray(t)`` (``__array__``) raise CUDA's ``TypeError`` (``NUMPY_ERROR``); ``.item()``,
  ``.tolist()``, ``float(t)``, ``int(t)`` and ``bool(t)`` work, as they do on CUDA (a synchronising copy);
* an op that mixes it with a plain CPU tensor of dim > 0 raises CUDA's ``RuntimeError`` (``MIXED_ERROR``); 0-dim
  CPU tensors and Python numbers mix freely, as with CUDA. Indexing with CPU index tensors, ``copy_`` and
  assignment across the two are allowed, as CUDA allows them.

The choice of ``.device``: it reports ``cuda:0`` (and ``is_cuda`` is True), because grpolab's code is right to
write ``torch.tensor(ids, device=t.device)`` or ``weights.to(t.device)`` and must then get a tensor on the same
device as ``t``; with ``.device`` reporting ``cpu``, such correct code would build a plain CPU tensor and trip the
mixed-device check (a false alarm), and code that branches on ``t.device.type == "cuda"`` would not be exercised.
The data itself stays on the CPU, so nothing may actually reach for a GPU: run the code under test inside
``simulated_cuda()``, a ``TorchFunctionMode`` that turns every request for a CUDA device (``device="cuda"`` or
``device=t.device`` in a factory such as ``torch.tensor``/``torch.zeros``/``torch.full``/``torch.arange``,
``plain.to(t.device)``, ``plain.cuda()``) into a CPU-backed ``DeviceTensor``. ``DeviceTensor``'s own ops never need
the mode (``t.to(t.device)`` works anywhere); only plain tensors and factories asked for ``cuda`` do. Without the
mode (or on a machine with a GPU) such a request goes to torch unchanged.

Helpers: ``on_device(obj)`` turns the tensors inside nested dicts, lists and tuples (and named tuples) into
``DeviceTensor``s, sharing their storage; ``off_device(obj)`` turns them back into plain tensors without counting
as a host crossing (test plumbing only: e.g. to hand TRL's CPU model its inputs back after the code under test
has seen them "on the device"). ``is_device_tensor(t)`` tells the two kinds apart.

Typical use (see tests/test_device_tensors.py and tests/integrations/test_device_crossings.py)::

    from device_tensors import on_device, simulated_cuda

    with simulated_cuda():
        metrics = code_under_test(on_device(batch))  # a numpy conversion without .cpu() raises TypeError
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

__all__ = [
    "CUDA",
    "MIXED_ERROR",
    "NUMPY_ERROR",
    "DeviceTensor",
    "is_device_tensor",
    "off_device",
    "on_device",
    "simulated_cuda",
]

CUDA = torch.device("cuda", 0)
NUMPY_ERROR = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory "
               "first.")
MIXED_ERROR = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
_CPU = torch.device("cpu")

_TO_NUMPY = {torch.Tensor.numpy, torch.Tensor.__array__}
# ops that accept a CPU tensor beside a CUDA one: CPU index tensors, cross-device copies and assignments
_MIXING_ALLOWED = {
    torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.copy_, torch.Tensor.to, torch.Tensor.cpu,
    torch.Tensor.cuda, torch.Tensor.new_tensor, torch.Tensor.index_put_, torch.Tensor.index_put, torch.Tensor.__repr__,
    torch.Tensor.__format__, torch.Tensor.as_subclass,
}


def _device_kind(spec: Any) -> str | None:
    """"cuda" or "cpu" for a device spec (``torch.device``, a string such as ``"cuda:0"``, a CUDA index), else None."""
    if isinstance(spec, torch.device):
        return spec.type if spec.type in ("cuda", "cpu") else None
    if isinstance(spec, str):
        try:
            return _device_kind(torch.device(spec))
        except RuntimeError:
            return None
    if isinstance(spec, int) and not isinstance(spec, bool):
        return "cuda"  # device=0 means cuda:0
    return None


def _tensor_kind(tensor: torch.Tensor) -> str:
    return "cuda" if isinstance(tensor, DeviceTensor) else tensor.device.type


def _target(func: Any, args: tuple, kwargs: dict) -> str | None:
    """Where ``func`` asks its result to live ("cuda", "cpu"), or None when it does not say."""
    if func is torch.Tensor.cpu:
        return "cpu"
    if func is torch.Tensor.cuda:
        return "cuda"
    if "device" in kwargs and kwargs["device"] is not None:
        return _device_kind(kwargs["device"])
    if func is torch.Tensor.to and len(args) > 1:
        first = args[1]
        if torch.is_tensor(first):  # t.to(other): other's device
            return _tensor_kind(first)
        if not isinstance(first, torch.dtype):
            return _device_kind(first)
    return None


def _on_host(func: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """``func``, ``args`` and ``kwargs`` with every CUDA device spec replaced by the CPU (where the data is)."""
    if func is torch.Tensor.cuda:  # t.cuda(device=None, non_blocking=False): t.to(cpu)
        return torch.Tensor.to, (args[0], _CPU), {}
    if _device_kind(kwargs.get("device")) == "cuda":
        kwargs = {**kwargs, "device": _CPU}
    if func is torch.Tensor.to and len(args) > 1 and not torch.is_tensor(args[1]) and _device_kind(args[1]) == "cuda":
        args = (args[0], _CPU, *args[2:])
    return func, args, kwargs


def _wrap(value: Any) -> Any:
    """Tensors in ``value`` (a tensor, or a tuple/list/named tuple of them) as ``DeviceTensor``s."""
    if isinstance(value, torch.Tensor):
        return value if isinstance(value, DeviceTensor) else value.as_subclass(DeviceTensor)
    if isinstance(value, tuple | list):
        items = [_wrap(item) for item in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    return value


def _to_host(value: Any) -> Any:
    """A result of a crossing to the host: plain tensors, copied out of a ``DeviceTensor`` (CUDA copies too)."""
    if isinstance(value, DeviceTensor):
        with torch._C.DisableTorchFunctionSubclass():
            return value.as_subclass(torch.Tensor).clone()
    return value


class DeviceTensor(torch.Tensor):
    """A CPU tensor that behaves like one on ``cuda:0`` (see the module docstring). Make one with ``on_device``."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return CUDA

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _TO_NUMPY:
            raise TypeError(NUMPY_ERROR)
        if func is torch.Tensor.get_device:
            return CUDA.index
        if func is torch.Tensor.__format__ and args[0].dim() == 0:  # torch formats only plain 0-dim tensors
            return args[0].item().__format__(*args[1:])
        if func is torch.Tensor.as_subclass:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if func not in _MIXING_ALLOWED:
            _refuse_mixed(args, kwargs)
        target = _target(func, args, kwargs)
        func, args, kwargs = _on_host(func, args, kwargs)
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **kwargs)
        if target == "cpu":
            return _to_host(result)
        return _wrap(result)


def _refuse_mixed(args: tuple, kwargs: dict) -> None:
    """CUDA's error for an op that mixes a ``DeviceTensor`` with a CPU tensor of dim > 0."""
    tensors = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
    on_device = any(isinstance(t, DeviceTensor) for t in tensors)
    on_host = any(not isinstance(t, DeviceTensor) and t.device.type == "cpu" and t.dim() > 0 for t in tensors)
    if on_device and on_host:
        raise RuntimeError(MIXED_ERROR)


class _SimulatedCuda(TorchFunctionMode):
    """Turns a request for a CUDA device from plain tensors and factories into a CPU-backed ``DeviceTensor``."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not any(issubclass(kind, DeviceTensor) for kind in types) and _target(func, args, kwargs) == "cuda":
            func, args, kwargs = _on_host(func, args, kwargs)
            return _wrap(func(*args, **kwargs))
        return func(*args, **kwargs)


@contextmanager
def simulated_cuda() -> Iterator[None]:
    """Within it, asking torch for a CUDA device gives a ``DeviceTensor`` (on the CPU) instead of reaching a GPU."""
    with _SimulatedCuda():
        yield


def is_device_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``DeviceTensor`` (a tensor "on the accelerator")."""
    return isinstance(value, DeviceTensor)


def _map_tensors(obj: Any, convert: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return convert(obj)
    if isinstance(obj, Mapping):
        items = {key: _map_tensors(value, convert) for key, value in obj.items()}
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(value, convert) for value in obj))
    if isinstance(obj, list | tuple):
        return type(obj)(_map_tensors(value, convert) for value in obj)
    return obj


def _to_device(tensor: torch.Tensor) -> torch.Tensor:
    if isinstance(tensor, DeviceTensor):
        return tensor
    if tensor.is_leaf:  # a leaf (a parameter, an input) stays a leaf, and its gradient lands on the DeviceTensor
        return torch.Tensor._make_subclass(DeviceTensor, tensor.detach(), tensor.requires_grad)
    return tensor.as_subclass(DeviceTensor)  # inside a graph: stays attached to it


def on_device(obj: Any) -> Any:
    """``obj`` with every tensor inside it (nested dicts, lists, tuples) a ``DeviceTensor`` sharing its storage."""
    return _map_tensors(obj, _to_device)


def off_device(obj: Any) -> Any:
    """``obj`` with every ``DeviceTensor`` inside it a plain tensor sharing its storage: test plumbing, not a
    host crossing (nothing is copied, and the code under test never sees it)."""
    return _map_tensors(obj, lambda t: t.as_subclass(torch.Tensor) if isinstance(t, DeviceTensor) else t)
