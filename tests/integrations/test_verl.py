"""grpolab.integrations.verl against verl 0.9.1's advantage-estimator interface, without verl installed.

These tests install a stub ``verl.trainer.ppo.core_algos`` that mimics verl 0.9.1's registry
(``ADV_ESTIMATOR_REGISTRY``; ``register_adv_est`` rejects a different function under a taken name) and
compare the adapter with plain loops written from verl's definitions (grpo, rloo,
reinforce_plus_plus_baseline, with verl's rule for a group of one response). The same comparisons
against the real verl run in ``tests/integrations/test_verl_real.py`` (``make test-verl``).
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
import torch

from grpolab import advantages as registry
from grpolab import diagnostics
from grpolab.errors import UserError
from grpolab.integrations.verl import estimators as adapter
from grpolab.integrations.verl.metrics import starvation_metrics
from verl_batches import RAGGED_SIZES, make_batch


def _install_stub(monkeypatch: pytest.MonkeyPatch, *, with_registry: bool = True) -> dict[str, Any]:
    table: dict[str, Any] = {}

    def register_adv_est(name: str) -> Any:
        def decorator(fn: Any) -> Any:
            if name in table and table[name] != fn:
                raise ValueError(f"Adv estimator {name} has already been registered: {table[name]} vs {fn}")
            table[name] = fn
            return fn

        return decorator

    core_algos = types.ModuleType("verl.trainer.ppo.core_algos")
    if with_registry:
        core_algos.ADV_ESTIMATOR_REGISTRY = table
    core_algos.register_adv_est = register_adv_est
    ppo = types.ModuleType("verl.trainer.ppo")
    ppo.core_algos = core_algos
    for name in ("verl", "verl.trainer"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo", ppo)
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core_algos)
    monkeypatch.delitem(sys.modules, "grpolab.integrations.verl.plugin", raising=False)
    return table


def _verl_loop(kind: str, token_level_rewards: torch.Tensor, index: np.ndarray) -> torch.Tensor:
    """verl 0.9.1's per-response outcome advantages as a plain loop: kind in grpo, dr_grpo, rloo, centred."""
    scores = token_level_rewards.sum(dim=-1).double()
    groups: dict[Any, list[float]] = defaultdict(list)
    for i in range(len(scores)):
        groups[index[i]].append(float(scores[i]))
    out = []
    for i in range(len(scores)):
        members = torch.tensor(groups[index[i]], dtype=torch.float64)
        size = len(members)
        mean, std = (members.mean(), members.std()) if size > 1 else (0.0, 1.0)  # verl: one response: 0, 1
        if kind == "grpo":
            out.append((scores[i] - mean) / (std + 1e-6))
        elif kind == "rloo":
            out.append(scores[i] * size / (size - 1) - mean * size / (size - 1) if size > 1 else scores[i])
        else:  # dr_grpo, and the centring of reinforce_plus_plus_baseline
            out.append(scores[i] - mean)
    return torch.stack([torch.as_tensor(value, dtype=torch.float64) for value in out])


def _call(table: dict[str, Any], name: str, batch: dict[str, Any], config: Any = None) -> torch.Tensor:
    advantages, returns = table[name](**batch, config=config)
    assert torch.equal(advantages, returns)
    return advantages


@pytest.mark.parametrize("sizes", [(4,) * 6, RAGGED_SIZES, (1,) * 5], ids=["equal", "ragged", "all-single"])
@pytest.mark.parametrize(("name", "kind"), [("grpo", "grpo"), ("dr_grpo", "dr_grpo"), ("rloo", "rloo")])
def test_default_conventions_equal_verl(
    monkeypatch: pytest.MonkeyPatch, sizes: tuple[int, ...], name: str, kind: str
) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all([name])
    batch = make_batch(sizes, seed=len(sizes))
    ours = _call(table, f"grpolab_{name}", batch)
    expected = _verl_loop(kind, batch["token_level_rewards"], batch["index"]).unsqueeze(-1) * batch["response_mask"]
    torch.testing.assert_close(ours.double(), expected, atol=1e-6, rtol=0)
    assert ours.dtype == batch["token_level_rewards"].dtype


def _verl_new_loop(kind: str, token_level_rewards: torch.Tensor, mask: torch.Tensor, index: np.ndarray,
                   norm: bool = True) -> torch.Tensor:
    """verl 0.9.1's grpo_passk, opo and gpg as plain loops over responses (per-response advantages [B])."""
    scores = token_level_rewards.sum(dim=-1).double().tolist()
    lengths = mask.sum(dim=-1).double().tolist()
    members: dict[Any, list[int]] = defaultdict(list)
    for i, uid in enumerate(index):
        members[uid].append(i)
    alpha = len(scores) / max(sum(1 for r in scores if r != 0), 1)  # gpg: B / non-zero rewards
    out = [0.0] * len(scores)
    for group in members.values():
        rewards = [scores[i] for i in group]
        if kind == "grpo_passk":  # the best response gets best - second best (over std + 1e-6)
            ranked = sorted(rewards, reverse=True)
            gap = ranked[0] - ranked[1]
            if norm:
                gap /= float(torch.tensor(rewards, dtype=torch.float64).std()) + 1e-6
            out[group[rewards.index(ranked[0])]] = gap
        elif kind == "opo":  # r - length-weighted mean; one response: baseline 0
            weights = [lengths[i] for i in group]
            base = sum(w * r for w, r in zip(weights, rewards, strict=True)) / sum(weights) if len(group) > 1 else 0
            for i in group:
                out[i] = scores[i] - base
        else:  # gpg: alpha (r - mean); one response: mean 0
            mean = sum(rewards) / len(rewards) if len(group) > 1 else 0.0
            for i in group:
                out[i] = alpha * (scores[i] - mean)
    return torch.tensor(out, dtype=torch.float64)


NO_SINGLES = (4, 4, 3, 5, 2, 4, 6)


@pytest.mark.parametrize(("name", "sizes", "norm"), [
    ("grpo_passk", NO_SINGLES, True), ("grpo_passk", NO_SINGLES, False), ("grpo_passk", (4,) * 6, True),
    ("opo", RAGGED_SIZES, True), ("opo", (1,) * 5, True), ("gpg", RAGGED_SIZES, True), ("gpg", (1,) * 5, True),
])
def test_verl_counterparts_equal_verls_loops(
    monkeypatch: pytest.MonkeyPatch, name: str, sizes: tuple[int, ...], norm: bool
) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all([name])
    batch = make_batch(sizes, seed=len(sizes))
    ours = _call(table, f"grpolab_{name}", batch, config={"norm_adv_by_std_in_grpo": norm})
    mask = batch["response_mask"]
    expected = _verl_new_loop(name, batch["token_level_rewards"], mask, batch["index"], norm).unsqueeze(-1) * mask
    torch.testing.assert_close(ours.double(), expected, atol=1e-6, rtol=0)
    assert ours.abs().sum() > 0


def test_grpo_passk_refuses_a_lone_response_under_verl_conventions_only(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["grpo_passk"])
    batch = make_batch(RAGGED_SIZES, seed=1)
    with pytest.raises(UserError, match=r"grpo_passk needs at least two responses per prompt.*rollout\.n >= 2"):
        _call(table, "grpolab_grpo_passk", batch)
    own = _call(table, "grpolab_grpo_passk", batch, config={"grpolab_conventions": "grpolab"})
    rewards, rows, cols = adapter.group_by_index(batch["token_level_rewards"].sum(-1), batch["index"])
    expected = registry.compute_advantages("grpo_passk", rewards)[torch.from_numpy(rows), torch.from_numpy(cols)]
    torch.testing.assert_close(own, expected.float().unsqueeze(-1) * batch["response_mask"])


def test_opo_reads_the_lengths_from_the_response_mask_under_both_conventions(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["opo"], conventions="grpolab")
    batch = make_batch((4,) * 6, seed=6)
    scores, lengths = batch["token_level_rewards"].sum(-1), batch["response_mask"].sum(-1)
    rewards, rows, cols = adapter.group_by_index(scores, batch["index"])
    grouped_lengths, _, _ = adapter.group_by_index(lengths, batch["index"])
    expected = registry.compute_advantages("opo", rewards, lengths=grouped_lengths)
    ours = _call(table, "grpolab_opo", batch)
    torch.testing.assert_close(ours, expected[torch.from_numpy(rows), torch.from_numpy(cols)].float().unsqueeze(-1)
                               * batch["response_mask"])
    dr_grpo = registry.compute_advantages("dr_grpo", rewards)[torch.from_numpy(rows), torch.from_numpy(cols)]
    assert not torch.allclose(ours[:, 0], dr_grpo.float())  # unequal lengths move the baseline


def test_reinforce_pp_whitens_over_tokens_like_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["reinforce_pp"])
    batch = make_batch(RAGGED_SIZES, seed=5)
    mask = batch["response_mask"].double()
    tokens = _verl_loop("centred", batch["token_level_rewards"], batch["index"]).unsqueeze(-1) * mask
    selected = tokens[mask.bool()]  # every response token of the batch, as verl's masked_whiten counts them
    expected = (tokens - selected.mean()) / torch.sqrt(selected.var() + 1e-8) * mask
    torch.testing.assert_close(_call(table, "grpolab_reinforce_pp", batch).double(), expected, atol=1e-6, rtol=0)
    with pytest.raises(UserError, match="no hyper-parameters"):
        _call(table, "grpolab_reinforce_pp", batch, config={"grpolab_kwargs": {"eps": 1e-3}})


def test_norm_adv_by_std_false_makes_grpo_dr_grpo(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["grpo", "dr_grpo"])
    batch = make_batch(RAGGED_SIZES, seed=2)
    plain = _call(table, "grpolab_grpo", batch, config={"norm_adv_by_std_in_grpo": False})
    torch.testing.assert_close(plain, _call(table, "grpolab_dr_grpo", batch))
    assert not torch.allclose(plain, _call(table, "grpolab_grpo", batch))


def test_grpolab_conventions_are_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["grpo", "rloo"], conventions="grpolab")
    batch = make_batch(RAGGED_SIZES, seed=3)
    rewards, rows, cols = adapter.group_by_index(batch["token_level_rewards"].sum(-1), batch["index"])
    own = registry.compute_advantages("grpo", rewards)[torch.from_numpy(rows), torch.from_numpy(cols)]  # eps 1e-4
    ours = _call(table, "grpolab_grpo", batch)
    torch.testing.assert_close(ours, own.float().unsqueeze(-1) * batch["response_mask"])
    single = torch.from_numpy(np.bincount(rows)[rows] == 1)
    assert torch.all(ours[single] == 0)  # grpolab: a response alone in its group gets no advantage
    verl_style = _call(table, "grpolab_grpo", batch, config={"grpolab_conventions": "verl"})
    assert (verl_style[single].sum(-1) != 0).any()
    with pytest.raises(UserError, match=r"rollout\.n >= 2"):
        _call(table, "grpolab_rloo", make_batch((1, 1, 1)))
    with pytest.raises(UserError, match="conventions must be one of"):
        _call(table, "grpolab_rloo", batch, config={"grpolab_conventions": "trl"})


def test_register_all_registers_every_estimator_and_reregisters(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    names = adapter.register_all()
    assert names == [f"grpolab_{n}" for n in registry.available() if not registry.info(n).needs_token_statistics]
    assert set(table) == set(names)
    assert adapter.register_all() == names  # calling again does not raise
    adapter.register_all(["passk"], advantage_kwargs={"passk": {"k": 3}})  # new settings replace the old
    batch = make_batch((4, 4, 4), seed=4)
    rewards, rows, cols = adapter.group_by_index(batch["token_level_rewards"].sum(-1), batch["index"])
    expected = registry.compute_advantages("passk", rewards, k=3)[torch.from_numpy(rows), torch.from_numpy(cols)]
    torch.testing.assert_close(_call(table, "grpolab_passk", batch)[:, 0], expected.float())
    table["grpolab_sign"] = lambda **_: None  # someone else's estimator under grpolab's name
    with pytest.raises(UserError, match="grpolab did not register"):
        adapter.register_all(["sign"])


def test_plugin_module_registers_on_import(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    plugin = importlib.import_module("grpolab.integrations.verl.plugin")
    assert set(plugin.REGISTERED) == set(table) and "grpolab_sign" in table


def test_plugin_failure_is_logged_as_warning(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _install_stub(monkeypatch, with_registry=False)  # a verl without ADV_ESTIMATOR_REGISTRY
    with caplog.at_level(logging.WARNING), pytest.raises(AttributeError):
        importlib.import_module("grpolab.integrations.verl.plugin")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "verl plugin failed" in r.message]
    assert len(warnings) == 1 and "ADV_ESTIMATOR_REGISTRY" in warnings[0].message


def test_sign_is_plus_minus_one_on_response_tokens_only(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["sign"])
    batch = make_batch(RAGGED_SIZES)
    advantages = table["grpolab_sign"](**batch, config=None, reward_baselines=None)[0]
    outcome = batch["token_level_rewards"].sum(-1, keepdim=True)
    assert torch.equal(advantages, (2 * outcome - 1) * batch["response_mask"])


def test_group_by_index_pads_unequal_groups() -> None:
    rewards, rows, cols = adapter.group_by_index(torch.tensor([1.0, 0.0, 1.0]), np.array(["a", "b", "a"]))
    assert rewards.shape == (2, 2) and torch.isnan(rewards[1, 1])
    assert rows.tolist() == [0, 1, 0] and cols.tolist() == [0, 0, 1]
    with pytest.raises(UserError, match="one group id per response"):
        adapter.group_by_index(torch.tensor([1.0, 0.0]), np.array(["a"]))


def test_config_kwargs_override_and_missing_index(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _install_stub(monkeypatch)
    adapter.register_all(["fixed_baseline", "grpo"])
    rewards_bt, mask = torch.tensor([[1.0], [0.0]]), torch.ones(2, 1)
    advantages, _ = table["grpolab_fixed_baseline"](
        rewards_bt, mask, np.array([0, 0]), config={"grpolab_kwargs": {"baseline": 0.25}}
    )
    assert advantages.squeeze(-1).tolist() == [0.75, -0.25]
    with pytest.raises(UserError, match="needs groups"):
        table["grpolab_grpo"](rewards_bt, mask, None)


def test_starvation_metrics_by_hand() -> None:
    # groups: a = [1, 1] (all correct), b = [0, 0, 0] (all wrong), c = [1, 0], d = [1] (one response,
    # which verl's single-response rule gives a non-zero advantage)
    uid = np.array(["a", "b", "c", "a", "b", "c", "b", "d"], dtype=object)
    outcome = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    lengths = torch.tensor([3, 1, 2, 3, 1, 1, 2, 2])
    mask = (torch.arange(3).unsqueeze(0) < lengths.unsqueeze(1)).float()  # [B, T]
    token_level_rewards = torch.zeros(8, 3)
    token_level_rewards[:, 0] = outcome
    advantages = torch.tensor([0.0, 0.0, 0.5, 0.0, 0.0, -0.5, 0.0, 1.0]).unsqueeze(-1) * mask
    data = {"token_level_rewards": token_level_rewards, "uid": uid, "response_mask": mask, "advantages": advantages}
    window = diagnostics.SuccessWindow(min_groups=64)
    metrics = starvation_metrics(data, window=window)
    assert window.groups == 4
    p_mean = (1 + 0 + 0.5 + 1) / 4
    expected = {
        "groups": 4, "all_correct": 2 / 4, "all_wrong": 1 / 4, "uniform": 3 / 4, "degenerate": 2 / 4,
        "p_mean": p_mean, "d_iid": p_mean**3 + (1 - p_mean) ** 3, "useful_fraction": 3 / 8,
        "scorable_fraction": 1.0, "useful_token_fraction": (2 + 1 + 2) / 15,
    }  # G in d_iid is the largest group, 3
    for key, value in expected.items():
        assert metrics[f"starvation/{key}"] == pytest.approx(value), key
    assert metrics["starvation/jensen_gap"] == pytest.approx(3 / 4 - expected["d_iid"])
    starvation_metrics(data, window=window)
    assert window.groups == 8
    with pytest.raises(UserError, match="has no 'uid'"):
        starvation_metrics({"token_level_rewards": token_level_rewards})
