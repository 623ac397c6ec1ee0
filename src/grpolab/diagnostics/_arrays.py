"""Input coercion shared by the diagnostics: tensors, arrays and nested lists -> numpy arrays.

A tensor crosses to the host through ``grpolab.devices.to_host``, so a diagnostic accepts a tensor on any device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grpolab.devices import to_host
from grpolab.errors import UserError


def as_float_matrix(values: Any, name: str) -> np.ndarray:
    """Return ``values`` (torch tensor, numpy array or nested list) as a float64 array of shape [P, G]."""
    if hasattr(values, "detach"):  # a torch.Tensor, maybe on an accelerator
        values = to_host(values).double().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2:
        raise UserError(f"{name} must be a 2-D [P, G] array (prompts x completions), got shape {array.shape}")
    return array


def as_int_vector(values: Any, name: str) -> np.ndarray:
    """Return ``values`` as a 1-D int64 array (scalars become length-1 arrays)."""
    if hasattr(values, "detach"):
        values = to_host(values).numpy()
    array = np.asarray(values)
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or np.any(array != np.round(array)):
            raise UserError(f"{name} must hold whole numbers, got {array!r}")
    elif array.dtype.kind not in "iub":
        raise UserError(f"{name} must be integers, got dtype {array.dtype}")
    return np.atleast_1d(array.astype(np.int64))
