"""grpolab's evaluation of a model that TRL holds on an accelerator (a CUDA GPU, say).

grpolab's sampler (``grpolab.engine.rollout``) keeps its tensors on the CPU: prompts, the sampling loop, the
random draws. ``DeviceBridge`` wraps the model so that each forward runs where the model is: the inputs go to
the model's device, the logits come back to the CPU, and the KV cache stays on the device. The lean Llama
decoder does not take the wrapper, so the sampler uses its transformers path (the same distribution, other
kernels). A model on the CPU is evaluated as it is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["DeviceBridge", "for_evaluation"]


class DeviceBridge(nn.Module):
    """``model`` with CPU tensors in and CPU logits out; the forward runs on ``model``'s device."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.inner = model
        self.device = next(model.parameters()).device
        self.train(model.training)  # the wrapper starts in the mode of the model it wraps

    @property
    def config(self) -> Any:
        return self.inner.config

    def forward(self, **inputs: Any) -> Any:
        moved = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in inputs.items()}
        output = self.inner(**moved)
        output.logits = output.logits.cpu()
        return output


def for_evaluation(model: nn.Module) -> nn.Module:
    """``model`` itself when it is on the CPU, else a ``DeviceBridge`` around it."""
    return model if next(model.parameters()).device.type == "cpu" else DeviceBridge(model)
