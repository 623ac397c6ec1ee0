"""grpolab's verl adapter against the real verl 0.9.1 (``make test-verl`` builds that environment).

Skipped when verl is not importable (the main environment). ``GRPOLAB_REQUIRE_VERL=1`` (set by
``make test-verl``) turns the skip into an import error, so a verl run cannot pass by skipping.

Everything goes through verl's own code: advantages through ``ray_trainer.compute_advantage`` on a real
``DataProto`` with verl's default algorithm config (composed by Hydra from verl's ``ppo_trainer.yaml``),
registration through the ``verl.plugins`` entry point of the installed grpolab, rollout dumps through
``RayPPOTrainer._write_generations`` (what ``trainer.rollout_data_dir`` uses).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from grpolab import advantages as registry
from grpolab import diagnostics
from grpolab.audit import audit
from grpolab.diagnostics.starvation import degeneracy
from grpolab.integrations.verl import estimators as adapter
from grpolab.integrations.verl.metrics import starvation_metrics
from verl_batches import RAGGED_SIZES, make_batch

if os.environ.get("GRPOLAB_REQUIRE_VERL") == "1":
    verl = importlib.import_module("verl")
else:
    verl = pytest.importorskip("verl")

from omegaconf import DictConfig, OmegaConf, open_dict
from verl import DataProto
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage

# What `import verl` registered (through the entry point), before any test registers anything.
REGISTERED_AT_IMPORT = sorted(name for name in ADV_ESTIMATOR_REGISTRY if name.startswith("grpolab_"))
EXPECTED_NAMES = sorted(f"grpolab_{name}" for name in registry.available()
                        if not registry.info(name).needs_token_statistics)  # verl computes that one itself
SIZES = {"ragged": RAGGED_SIZES, "all-single": (1,) * 5, "equal": (4,) * 6}
PARITY = [  # grpolab name, verl name, norm_adv_by_std_in_grpo for verl
    ("grpo", "grpo", True),
    ("dr_grpo", "grpo", False),
    ("rloo", "rloo", True),
    ("reinforce_pp", "reinforce_plus_plus_baseline", True),
    ("opo", "opo", True),
    ("gpg", "gpg", True),
]
# verl's grpo_passk refuses a prompt with one response, so its batches have none
PASSK_SIZES = {"ragged-no-single": (4, 4, 3, 5, 2, 4, 6), "equal": (4,) * 6, "pairs": (2,) * 8}


@pytest.fixture(scope="module")
def default_algorithm() -> DictConfig:
    """verl's default ``algorithm`` config, as ``main_ppo`` composes it."""
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer").algorithm


def _advantages(batch: dict[str, Any], estimator: str, algorithm: DictConfig, **overrides: Any) -> torch.Tensor:
    """verl's ``compute_advantage`` on a real DataProto, called the way verl's trainer calls it."""
    config = algorithm.copy()
    with open_dict(config):  # new keys, as `+algorithm.grpolab_kwargs...` adds them on verl's command line
        config.merge_with({"adv_estimator": estimator, **overrides})
    data = DataProto.from_dict(
        tensors={"token_level_rewards": batch["token_level_rewards"].clone(), "response_mask": batch["response_mask"]},
        non_tensors={"uid": batch["index"]},
    )
    out = compute_advantage(
        data,
        adv_estimator=config.adv_estimator,
        gamma=config.gamma,
        lam=config.lam,
        num_repeat=1,
        norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True),
        config=config,
    )
    return out.batch["advantages"]


def _clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH: only the installed grpolab (and its entry point) is visible."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}


def test_verl_is_the_tested_release() -> None:
    assert verl.__version__ == "0.9.1"


def test_import_verl_registered_every_name_through_the_entry_point() -> None:
    # `make test-verl` runs without PYTHONPATH, so only the installed grpolab's entry point is visible.
    assert REGISTERED_AT_IMPORT == EXPECTED_NAMES


def test_plugin_that_fails_to_load_says_so_at_warning_level(tmp_path: Path) -> None:
    code = "import sys\nsys.modules['grpolab.advantages'] = None  # grpolab breaks on import\nimport verl\n"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0  # verl itself goes on
    lines = [line for line in result.stderr.splitlines() if "verl plugin failed to load" in line]
    assert len(lines) == 1 and "WARNING" in lines[0] and "grpolab.advantages" in lines[0], result.stderr[-2000:]


@pytest.mark.parametrize("sizes", list(SIZES.values()), ids=list(SIZES))
@pytest.mark.parametrize(("ours", "theirs", "norm"), PARITY, ids=[p[0] for p in PARITY])
def test_default_config_equals_verl(
    default_algorithm: DictConfig, sizes: tuple[int, ...], ours: str, theirs: str, norm: bool
) -> None:
    batch = make_batch(sizes, seed=len(sizes))
    mine = _advantages(batch, f"grpolab_{ours}", default_algorithm)
    verls = _advantages(batch, theirs, default_algorithm, norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(mine, verls, atol=1e-6, rtol=0)
    assert mine.abs().sum() > 0


@pytest.mark.parametrize("norm", [True, False], ids=["std", "no-std"])
@pytest.mark.parametrize("sizes", list(PASSK_SIZES.values()), ids=list(PASSK_SIZES))
def test_grpo_passk_equals_verl(default_algorithm: DictConfig, sizes: tuple[int, ...], norm: bool) -> None:
    batch = make_batch(sizes, seed=len(sizes))
    options = {"norm_adv_by_std_in_grpo": norm}
    mine = _advantages(batch, "grpolab_grpo_passk", default_algorithm, **options)
    verls = _advantages(batch, "grpo_passk", default_algorithm, **options)
    torch.testing.assert_close(mine, verls, atol=1e-6, rtol=0)
    assert mine.abs().sum() > 0


def test_grpo_passk_refuses_a_lone_response_like_verl(default_algorithm: DictConfig) -> None:
    from grpolab.errors import UserError

    batch = make_batch(RAGGED_SIZES, seed=3)
    with pytest.raises(ValueError, match="at least 2 samples per group"):
        _advantages(batch, "grpo_passk", default_algorithm)
    with pytest.raises(UserError, match="at least two responses per prompt"):
        _advantages(batch, "grpolab_grpo_passk", default_algorithm)


def test_opo_lengths_matter_in_verl_and_in_grpolab(default_algorithm: DictConfig) -> None:
    batch = make_batch((4,) * 6, seed=8)
    opo = _advantages(batch, "grpolab_opo", default_algorithm)
    centred = _advantages(batch, "grpo", default_algorithm, norm_adv_by_std_in_grpo=False)
    assert (opo - centred).abs().max() > 1e-3  # the length weighting is not the plain group mean


def test_norm_adv_by_std_false_applies_to_grpolab_grpo(default_algorithm: DictConfig) -> None:
    batch = make_batch(RAGGED_SIZES, seed=7)
    off = {"norm_adv_by_std_in_grpo": False}
    mine = _advantages(batch, "grpolab_grpo", default_algorithm, **off)
    torch.testing.assert_close(mine, _advantages(batch, "grpo", default_algorithm, **off), atol=1e-6, rtol=0)


def test_sign_is_two_r_minus_one_times_mask(default_algorithm: DictConfig) -> None:
    batch = make_batch(RAGGED_SIZES, seed=1)
    expected = (2 * batch["token_level_rewards"].sum(-1, keepdim=True) - 1) * batch["response_mask"]
    assert torch.equal(_advantages(batch, "grpolab_sign", default_algorithm), expected)


def test_grpolab_conventions_differ_as_documented(default_algorithm: DictConfig) -> None:
    batch = make_batch(RAGGED_SIZES, seed=2)
    _, inverse, counts = np.unique(batch["index"], return_inverse=True, return_counts=True)
    single = torch.from_numpy(counts[inverse] == 1)  # [B] responses alone in their group
    mask = batch["response_mask"][single]
    batch["token_level_rewards"][single] = mask / mask.sum(-1, keepdim=True)  # reward 1, spread over tokens
    mine = _advantages(batch, "grpolab_grpo", default_algorithm, grpolab_conventions="grpolab")
    verls = _advantages(batch, "grpo", default_algorithm)
    assert torch.all(mine[single] == 0)  # grpolab: a response alone in its group gets 0
    torch.testing.assert_close(verls[single], mask / (1 + 1e-6))  # verl: about its reward
    gap = (mine[~single] - verls[~single]).abs().max().item()
    assert 1e-5 < gap < 1e-3  # eps 1e-4 against verl's 1e-6


def test_register_all_with_the_entry_point_active(default_algorithm: DictConfig) -> None:
    assert EXPECTED_NAMES == sorted(k for k in ADV_ESTIMATOR_REGISTRY if k.startswith("grpolab_"))
    batch = make_batch((6,) * 4, seed=3)
    rewards, rows, cols = adapter.group_by_index(batch["token_level_rewards"].sum(-1), batch["index"])
    try:
        adapter.register_all(advantage_kwargs={"passk": {"k": 4}})  # the entry point registered k = 2
        expected = registry.compute_advantages("passk", rewards, k=4)[torch.from_numpy(rows), torch.from_numpy(cols)]
        mine = _advantages(batch, "grpolab_passk", default_algorithm)
        torch.testing.assert_close(mine, expected.float().unsqueeze(-1) * batch["response_mask"])
        from_config = _advantages(batch, "grpolab_passk", default_algorithm, grpolab_kwargs={"k": 3})
        expected = registry.compute_advantages("passk", rewards, k=3)[torch.from_numpy(rows), torch.from_numpy(cols)]
        torch.testing.assert_close(from_config, expected.float().unsqueeze(-1) * batch["response_mask"])
    finally:
        adapter.register_all()


def test_starvation_metrics_of_verls_batch(default_algorithm: DictConfig) -> None:
    batch = make_batch((4,) * 8, seed=4)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": batch["token_level_rewards"], "response_mask": batch["response_mask"]},
        non_tensors={"uid": batch["index"]},
    )
    data = compute_advantage(data, adv_estimator="grpo", config=OmegaConf.merge(default_algorithm, {}))
    metrics = starvation_metrics(data)
    outcome = batch["token_level_rewards"].sum(-1).numpy()
    matrix = np.stack([outcome[batch["index"] == uid] for uid in sorted(set(batch["index"]))])  # [P, G]
    expected = diagnostics.starvation_metrics(matrix)  # from the rewards alone: binary, so the same groups
    keys = ("groups", "all_correct", "all_wrong", "uniform", "degenerate", "p_mean", "d_iid", "jensen_gap",
            "useful_fraction", "scorable_fraction")
    for key in keys:
        assert metrics[f"starvation/{key}"] == pytest.approx(expected[f"starvation/{key}"]), key
    assert metrics["starvation/all_correct"] > 0 and metrics["starvation/all_wrong"] > 0
    assert 0 < metrics["starvation/useful_token_fraction"] < 1


def test_audit_reads_verls_rollout_dumps(tmp_path: Path) -> None:
    expected = []
    for step in (1, 2):
        batch = make_batch((4,) * 8, seed=10 + step)
        outcome = batch["token_level_rewards"].sum(-1)
        inputs = [f"Question {uid}: what is {len(uid)} + {step}?" for uid in batch["index"]]
        RayPPOTrainer._write_generations(
            inputs, ["answer"] * len(inputs), [None] * len(inputs), outcome.tolist(), {}, str(tmp_path), step
        )
        matrix = np.stack([outcome.numpy()[batch["index"] == uid] for uid in sorted(set(batch["index"]))])
        expected.append(degeneracy(matrix))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.jsonl", "2.jsonl"]
    result = audit(tmp_path, prompt_column="input")
    assert result["steps"] == 2 and result["group_size"] == 4
    p_run = np.mean([want["p_mean"] for want in expected])  # 16 groups < 64: pbar over the whole run
    for row, want in zip(result["per_step"], expected, strict=True):
        for key in ("all_correct", "all_wrong", "degenerate", "p_mean"):
            assert row[key] == pytest.approx(want[key]), key
        assert row["d_iid"] == pytest.approx(p_run**4 + (1 - p_run) ** 4)


def test_main_ppo_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "--help"],
        cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "adv_estimator" in result.stdout and "norm_adv_by_std_in_grpo" in result.stdout


def _otb_statistics(mask: torch.Tensor, seed: int, vocab: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """A policy's log-probabilities of drawn tokens and sum of pi^2 [B, T]: random logits, a token drawn from each."""
    gen = torch.Generator().manual_seed(seed)
    probs = torch.softmax(2 * torch.randn(*mask.shape, vocab, generator=gen), dim=-1)  # [B, T, V]
    drawn = torch.multinomial(probs.reshape(-1, vocab), 1, generator=gen).view(mask.shape)
    logprobs = probs.gather(-1, drawn.unsqueeze(-1)).squeeze(-1).log() * mask
    return logprobs, (probs**2).sum(-1) * mask


def _with_a_lone_longest_response(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with the first group's first response the only one of full length (the others at most one token
    shorter), its outcome reward moved to its new last token, so that verl's zero tail acts on it."""
    mask, rewards = batch["response_mask"].clone(), batch["token_level_rewards"]
    outcome, width = rewards.sum(-1), mask.shape[1]
    rows = np.flatnonzero(batch["index"] == batch["index"][np.argsort(batch["index"], kind="stable")[0]])
    mask[rows[0]] = 1.0
    mask[rows[1:], width - 1] = 0.0
    lengths = mask.sum(-1).long()
    moved = torch.zeros_like(rewards)
    moved[torch.arange(len(lengths)), lengths - 1] = outcome
    return {**batch, "response_mask": mask, "token_level_rewards": moved}


@pytest.mark.parametrize("sizes", [(4,) * 6, (2,) * 8, (3,) * 5, (8,) * 3], ids=lambda s: f"{len(s)}x{s[0]}")
@pytest.mark.parametrize("seed", range(3))
def test_optimal_token_baseline_equals_verls(default_algorithm: DictConfig, sizes: tuple[int, ...],
                                             seed: int) -> None:
    """grpolab's ``optimal_token_baseline`` against verl's, through verl's ``compute_advantage`` with the actor's
    ``old_log_probs`` and ``sum_pi_squared`` in the DataProto, to 1e-6 on every token. Both run in float64 (verl
    computes in its inputs' dtype), so that float32 rounding of the cumulative weights is not what is compared.
    Every batch has a group with one longest response, so the zero tail is compared too."""
    batch = _with_a_lone_longest_response(make_batch(sizes, seed=seed))
    mask = batch["response_mask"].double()
    logprobs, squares = (t.double() for t in _otb_statistics(mask, seed))
    config = default_algorithm.copy()
    with open_dict(config):
        config.merge_with({"adv_estimator": "optimal_token_baseline"})
    data = DataProto.from_dict(tensors={"token_level_rewards": batch["token_level_rewards"].double(),
                                        "response_mask": mask, "old_log_probs": logprobs, "sum_pi_squared": squares},
                               non_tensors={"uid": batch["index"]})
    verls = compute_advantage(data, adv_estimator="optimal_token_baseline", gamma=config.gamma, lam=config.lam,
                              num_repeat=1, config=config).batch["advantages"]
    order = np.argsort(batch["index"], kind="stable")  # rows group by group, as grpolab takes them
    rewards = batch["token_level_rewards"].double().sum(-1)[order].view(len(sizes), sizes[0])  # [P, G]
    statistics = registry.TokenStatistics(mask[order], logprobs[order], squares[order])
    mine = registry.compute_advantages("optimal_token_baseline", rewards, token_statistics=statistics)
    torch.testing.assert_close(mine, verls[order], atol=1e-6, rtol=0)
    assert (mine.abs() > 1e-3).any()  # not vacuous
    lengths = mask.sum(-1)[order].view(len(sizes), sizes[0])
    assert ((lengths == lengths.max(dim=1, keepdim=True).values).sum(dim=1) == 1).any()
