"""``grpolab.train.update.build_optimizer``: torch's fused AdamW where it applies, the same update as the
``foreach`` implementation (tolerance 1e-6 relative on the parameters after 5 steps, float32)."""

from __future__ import annotations

import pytest
import torch

from grpolab.config import TrainConfig
from grpolab.train.update import build_optimizer

pytestmark = pytest.mark.fast


def _params(seed: int) -> dict[str, torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return {f"w{i}": torch.nn.Parameter(torch.randn(shape, generator=generator))
            for i, shape in enumerate([(8, 4), (4,), (3, 5, 2)])}


def test_fused_adamw_updates_as_the_foreach_implementation() -> None:
    config = TrainConfig(lr=1e-2, weight_decay=0.1)
    fused_params, reference_params = _params(0), _params(0)
    fused = build_optimizer(fused_params, config)
    assert fused.param_groups[0]["fused"] is True
    reference = torch.optim.AdamW(list(reference_params.values()), lr=config.lr, betas=config.adam_betas,
                                  weight_decay=config.weight_decay, foreach=True)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        for a, b in zip(fused_params.values(), reference_params.values(), strict=True):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        fused.step()
        reference.step()
    for name, param in fused_params.items():
        moved = (param - _params(0)[name]).abs().max()
        assert moved > 1e-3
        assert torch.allclose(param, reference_params[name], rtol=1e-6, atol=1e-7), name


def test_parameters_the_fused_kernel_does_not_take_use_foreach() -> None:
    params = {"w": torch.nn.Parameter(torch.randn(3, dtype=torch.complex64))}
    assert build_optimizer(params, TrainConfig()).param_groups[0]["foreach"] is True
