"""tests/device_tensors.py: a CPU tensor that refuses what a CUDA tensor refuses, and nothing more."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
import torch

from device_tensors import (
    CUDA,
    MIXED_ERROR,
    NUMPY_ERROR,
    DeviceTensor,
    is_device_tensor,
    off_device,
    on_device,
    simulated_cuda,
)

pytestmark = pytest.mark.fast


def _plain(value: object) -> bool:
    return type(value) is torch.Tensor


def test_ops_keep_the_tensor_on_the_device() -> None:
    t = on_device(torch.arange(6.0).view(2, 3))
    results = [t + 1, 2 * t, t * t, t.sum(), t.sum(dim=1), t.view(3, 2), t.reshape(-1), t[0], t[:, 1:], t[t > 2],
               t.to(torch.float64), t.double(), t.int(), t.detach(), t.clone(), t.T, torch.where(t > 2, t, 0.0),
               torch.cat([t, t]), torch.isnan(t), t.mean(), t.unsqueeze(0), t.abs(), t.max(dim=1).values,
               torch.stack([t, t]), t.new_zeros(2), torch.zeros_like(t), t.to(t.device), t.cuda(), t.to("cuda"),
               t.to(CUDA, torch.float16), t.to(dtype=torch.float16), t.nansum(dim=1), t.float().exp()]
    for result in results:
        assert is_device_tensor(result), result
    assert t.to(t) is t  # same device and dtype: the same tensor, as torch does
    assert is_device_tensor(t.max(dim=1).indices) and is_device_tensor(next(iter(t)))
    inplace = t.clone()
    inplace += 1
    inplace[0, 0] = 7.0
    assert is_device_tensor(inplace) and inplace[0, 0].item() == 7.0


def test_autograd_runs_on_the_device() -> None:
    weight = on_device(torch.ones(3, requires_grad=True))
    assert weight.is_leaf and weight.requires_grad  # a parameter moved to the device is a leaf there too
    loss = (weight * 2).sum()
    assert is_device_tensor(loss)
    loss.backward()
    assert weight.grad is not None and weight.grad.tolist() == [2.0, 2.0, 2.0]


def test_the_crossing_to_the_host_gives_a_plain_copy() -> None:
    t = on_device(torch.tensor([1.0, 2.0]))
    for host in (t.cpu(), t.to("cpu"), t.to(torch.device("cpu")), t.to("cpu", torch.float64), t.to(device="cpu"),
                 t.to(torch.zeros(1)), t.detach().cpu()):
        assert _plain(host) and host.device.type == "cpu"
        assert host.numpy().tolist() == [1.0, 2.0]
    host = t.cpu()
    host[0] = 9.0
    assert t[0].item() == 1.0  # a copy, as on CUDA


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # numpy's retry, as with CUDA
def test_numpy_refuses_the_tensor_as_cuda_does() -> None:
    t = on_device(torch.tensor([[1.0, 2.0]]))
    for convert in (lambda: t.numpy(), lambda: np.asarray(t), lambda: np.asarray(t, dtype=np.float64),
                    lambda: np.array(t), lambda: np.asarray(t.sum(dim=1)), lambda: t.detach().numpy()):
        with pytest.raises(TypeError) as error:
            convert()
        assert str(error.value) == NUMPY_ERROR
    assert t.tolist() == [[1.0, 2.0]] and t.sum().item() == 3.0  # these copy to the host on CUDA too
    assert float(t.sum()) == 3.0 and int(t[0, 1]) == 2 and bool(t[0, 0]) and f"{t.sum():.1f}" == "3.0"
    assert "cuda:0" in repr(t)


def test_mixing_with_a_cpu_tensor_fails_as_on_cuda() -> None:
    t = on_device(torch.tensor([1.0, 2.0]))
    cpu = torch.tensor([1.0, 1.0])
    for mix in (lambda: t + cpu, lambda: cpu * t, lambda: torch.cat([t, cpu]), lambda: torch.where(t > 1, t, cpu),
                lambda: torch.isin(t, cpu), lambda: t.index_select(0, torch.tensor([0]))):
        with pytest.raises(RuntimeError) as error:
            mix()
        assert str(error.value) == MIXED_ERROR
    # what CUDA allows: 0-dim CPU tensors, Python numbers, CPU index tensors, copies across
    assert (t + torch.tensor(1.0)).tolist() == [2.0, 3.0] and (t * 2.5).tolist() == [2.5, 5.0]
    assert t[torch.tensor([1])].tolist() == [2.0] and t[torch.tensor([True, False])].tolist() == [1.0]
    copy = t.clone()
    copy.copy_(cpu)
    copy[torch.tensor([0])] = 5.0
    assert copy.tolist() == [5.0, 1.0]


def test_device_reports_cuda_without_reaching_a_gpu() -> None:
    t = on_device(torch.tensor([1.0, 2.0]))
    assert t.device == CUDA and t.is_cuda and not t.is_cpu and t.get_device() == 0
    assert t.to(t.device) is t  # its own ops need no GPU and no mode
    with simulated_cuda():
        for made in (torch.tensor([1.0, 1.0], device=t.device), torch.zeros(2, device="cuda"),
                     torch.full((2,), 1.0, device=CUDA), torch.arange(2, device="cuda:0"), torch.ones(2).to(t.device),
                     torch.ones(2).cuda(), torch.ones(2).to("cuda", torch.float64), torch.ones(2).to(t),
                     torch.as_tensor([1.0, 2.0], device=t.device)):
            assert is_device_tensor(made) and made.device == CUDA
            assert (t + made).device == CUDA  # correct code: the new tensor is on t's device
        assert _plain(torch.ones(2)) and _plain(torch.ones(2).to("cpu"))  # CPU work stays plain
        assert _plain(torch.zeros(2, device="cpu") + 1)


def test_on_device_and_off_device_walk_nested_containers() -> None:
    Pair = namedtuple("Pair", "a b")
    batch = {"ids": torch.tensor([[1, 2]]), "rest": [torch.ones(1), (torch.zeros(2), "text")],
             "pair": Pair(torch.ones(1), 3), "n": 4}
    moved = on_device(batch)
    assert all(is_device_tensor(t) for t in (moved["ids"], moved["rest"][0], moved["rest"][1][0]))
    assert isinstance(moved["pair"], Pair) and is_device_tensor(moved["pair"].a) and moved["pair"].b == 3
    assert moved["rest"][1][1] == "text" and moved["n"] == 4 and not is_device_tensor(batch["ids"])
    back = off_device(moved)
    assert _plain(back["ids"]) and _plain(back["rest"][1][0]) and _plain(back["pair"].a)
    assert torch.equal(back["ids"], batch["ids"])
    assert isinstance(moved["ids"], DeviceTensor) and on_device(moved["ids"]) is moved["ids"]
