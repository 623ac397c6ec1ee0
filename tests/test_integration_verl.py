"""grpolab.integrations.verl against verl's documented advantage-estimator interface.

verl is not installed in the main environment, so most tests install a stub
``verl.trainer.ppo.core_algos`` that mimics verl 0.9.1's registry (``register_adv_est`` rejects a
different function under a taken name; ``get_adv_estimator_fn`` raises ``ValueError`` for unknown names)
and call the estimators the way ``verl.trainer.ppo.ray_trainer.compute_advantage`` does. When verl is
importable, ``test_real_verl_*`` run against the real registry and verl's own GRPO.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
import torch

from grpolab import advantages as registry
from grpolab.integrations import verl as adapter


def _install_stub(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    table: dict[str, Any] = {}

    def register_adv_est(name: str) -> Any:
        def decorator(fn: Any) -> Any:
            if name in table and table[name] != fn:
                raise ValueError(f"Adv estimator {name} has already been registered: {table[name]} vs {fn}")
            table[name] = fn
            return fn

        return decorator

    def get_adv_estimator_fn(name: str) -> Any:
        if name not in table:
            raise ValueError(f"Unknown advantage estimator simply: {name}")
        return table[name]

    core_algos = types.ModuleType("verl.trainer.ppo.core_algos")
    core_algos.ADV_ESTIMATOR_REGISTRY = table
    core_algos.register_adv_est = register_adv_est
    core_algos.get_adv_estimator_fn = get_adv_estimator_fn
    for name in ("verl", "verl.trainer", "verl.trainer.ppo"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core_algos)
    monkeypatch.delitem(sys.modules, "grpolab.integrations.verl_plugin", raising=False)
    return table


def _batch(groups: int, size: int, length: int = 5, seed: int = 0) -> dict[str, Any]:
    """A verl-like batch: binary outcome reward on the last response token, shuffled group ids."""
    gen = torch.Generator().manual_seed(seed)
    batch = groups * size
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).float()  # [B, T]
    outcome = torch.randint(0, 2, (batch,), generator=gen).float()
    outcome[:size] = 1.0  # one all-correct group
    outcome[size : 2 * size] = 0.0  # one all-wrong group
    token_level_rewards = torch.zeros(batch, length)
    token_level_rewards[torch.arange(batch), lengths - 1] = outcome
    uids = np.array([f"uid-{g}" for g in range(groups) for _ in range(size)], dtype=object)
    perm = torch.randperm(batch, generator=gen)
    return {
        "token_level_rewards": token_level_rewards[perm],
        "response_mask": mask[perm],
        "index": uids[perm],
    }


def _verl_grpo_loop(token_level_rewards: torch.Tensor, index: np.ndarray, eps: float) -> torch.Tensor:
    """verl 0.9.1 ``compute_grpo_outcome_advantage`` per-response scores, as its plain loop."""
    scores = token_level_rewards.sum(dim=-1)
    by_id: dict[Any, list[torch.Tensor]] = defaultdict(list)
    for i in range(len(scores)):
        by_id[index[i]].append(scores[i])
    stats = {k: (torch.stack(v).mean(), torch.stack(v).std()) for k, v in by_id.items()}
    return torch.stack(
        [(scores[i] - stats[index[i]][0]) / (stats[index[i]][1] + eps) for i in range(len(scores))]
    )


def test_register_all_registers_every_estimator_once(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    names = adapter.register_all()
    assert names == [f"grpolab_{n}" for n in registry.available()]
    assert set(table) == set(names)
    assert adapter.register_all() == names  # idempotent
    with pytest.raises(ValueError, match="already been registered"):
        adapter.register_all(["passk"], advantage_kwargs={"passk": {"k": 3}})


def test_plugin_module_registers_on_import(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    plugin = importlib.import_module("grpolab.integrations.verl_plugin")
    assert "grpolab_sign" in table and plugin.REGISTERED == sorted(plugin.REGISTERED)


@pytest.mark.parametrize(("groups", "size", "eps"), [(4, 2, 1e-6), (6, 4, 1e-6), (3, 8, 1e-4)])
def test_grpo_equals_verl_grpo_loop(
    monkeypatch: pytest.MonkeyPatch, groups: int, size: int, eps: float
) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["grpo"], advantage_kwargs={"grpo": {"eps": eps}})
    batch = _batch(groups, size, seed=groups)
    advantages, returns = table["grpolab_grpo"](**batch, config=None)
    expected = _verl_grpo_loop(batch["token_level_rewards"], batch["index"], eps)
    torch.testing.assert_close(advantages, expected.unsqueeze(-1) * batch["response_mask"])
    assert advantages is returns or torch.equal(advantages, returns)


def test_sign_is_plus_minus_one_on_response_tokens_only(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["sign"])
    batch = _batch(5, 4)
    advantages, _ = table["grpolab_sign"](**batch, config=None, reward_baselines=None)
    mask = batch["response_mask"].bool()
    outcome = batch["token_level_rewards"].sum(-1, keepdim=True).expand_as(mask)
    assert torch.equal(advantages[mask], (2 * outcome - 1)[mask])
    assert torch.all(advantages[~mask] == 0)


def test_unequal_groups_are_nan_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    rewards, rows, cols = adapter.group_by_index(torch.tensor([1.0, 0.0, 1.0]), np.array(["a", "b", "a"]))
    assert rewards.shape == (2, 2) and torch.isnan(rewards[1, 1])
    assert rows.tolist() == [0, 1, 0] and cols.tolist() == [0, 0, 1]
    table = _install_stub(monkeypatch)
    adapter.register_all(["dr_grpo"])
    rewards_bt = torch.tensor([[1.0], [0.0], [0.0]])
    advantages, _ = table["grpolab_dr_grpo"](rewards_bt, torch.ones(3, 1), np.array(["a", "b", "a"]))
    assert advantages.squeeze(-1).tolist() == [0.5, 0.0, -0.5]


def test_config_kwargs_override_and_missing_index(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["fixed_baseline", "grpo"])
    rewards_bt, mask = torch.tensor([[1.0], [0.0]]), torch.ones(2, 1)
    advantages, _ = table["grpolab_fixed_baseline"](
        rewards_bt, mask, np.array([0, 0]), config={"grpolab_kwargs": {"baseline": 0.25}}
    )
    assert advantages.squeeze(-1).tolist() == [0.75, -0.25]
    with pytest.raises(ValueError, match="needs groups"):
        table["grpolab_grpo"](rewards_bt, mask, None)


def test_real_verl_grpo_matches() -> None:
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    adapter.register_all(advantage_kwargs={"grpo": {"eps": 1e-6}})
    batch = _batch(6, 4, seed=3)
    ours, _ = core_algos.get_adv_estimator_fn("grpolab_grpo")(**batch, config=None)
    theirs, _ = core_algos.get_adv_estimator_fn("grpo")(**batch, epsilon=1e-6)
    torch.testing.assert_close(ours, theirs)
    sign, _ = core_algos.get_adv_estimator_fn("grpolab_sign")(**batch, config=None)
    assert set(sign[batch["response_mask"].bool()].tolist()) <= {-1.0, 1.0}
