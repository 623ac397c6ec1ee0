"""The loss options wired into the update (``grpolab.train.update``), on the embedded model: each one changes the
update only where it should, equals the plain update where the papers say it does, and logs what it did.

Parameter changes are compared after one SGD step with lr 1 and no gradient clipping, so that the change is
exactly minus the gradient.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from tests.float_bounds import reordered_sum_gap
from tests.train.sampled_batch import MIXED_REWARDS, sampled_arith_batch

from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.overlong import overlong_penalty
from grpolab.train import forward, train
from grpolab.train.batch import StepBatch
from grpolab.train.forward import policy_logprobs
from grpolab.train.step_advantages import step_advantages
from grpolab.train.update import loss_mask, update_policy

pytestmark = pytest.mark.fast

CAP = 16
TRUNCATED_ROWS = [0, 5, 10]


@pytest.fixture(scope="module")
def setup():
    policy, batch = sampled_arith_batch(MIXED_REWARDS, max_new_tokens=CAP)
    truncated = torch.zeros(batch.size, dtype=torch.bool)
    truncated[TRUNCATED_ROWS] = True
    return policy, replace(batch, truncated=truncated)


def _config(**changes) -> TrainConfig:
    return TrainConfig(**{"advantage": "grpo", "lr": 1.0, "max_grad_norm": 0.0, "micro_batch_size": 8, **changes})


def _step(policy, batch: StepBatch, config: TrainConfig, advantages: torch.Tensor | None = None):
    """(parameter change of one update, its metrics) with SGD at the config's lr (1 unless the test says): the
    change of one iteration is minus lr times the gradient."""
    model = copy.deepcopy(policy.model).train()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(list(model.parameters()), lr=config.lr)
    if advantages is None:
        advantages = compute_advantages(config.advantage, batch.rewards)
    metrics = update_policy(model, optimizer, batch, advantages, config,
                            lr=config.lr, max_length=CAP)
    change = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before, strict=True)])
    return change, metrics


def _relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """|a - b| / |b| over all parameters: float32 rounding of the same update stays below 1e-5 (a single element
    near 0 may differ by 1% relative, so elementwise tolerances would test the rounding, not the update)."""
    assert b.norm() > 0
    return float((a - b).norm() / b.norm())


def test_loss_mask_drops_exactly_the_truncated_rows(setup) -> None:
    _, batch = setup
    assert torch.equal(loss_mask(batch, _config()), batch.completion_mask.float())
    masked = loss_mask(batch, _config(mask_truncated_completions=True))
    kept = [row for row in range(batch.size) if row not in TRUNCATED_ROWS]
    assert (masked[TRUNCATED_ROWS] == 0).all()
    assert torch.equal(masked[kept], batch.completion_mask[kept].float())


def test_mask_truncated_equals_zero_advantages_on_those_rows(setup) -> None:
    # Under a per-sequence normaliser (seq_mean_token_sum: the batch's row count) masking a row is exactly giving
    # it advantage 0; the other rows' gradients are untouched.
    policy, batch = setup
    advantages = compute_advantages("grpo", batch.rewards)  # [P, G]
    zeroed = advantages.clone().reshape(-1)
    zeroed[TRUNCATED_ROWS] = 0.0
    masked, metrics = _step(policy, batch, _config(mask_truncated_completions=True,
                                                   loss_aggregation="seq_mean_token_sum"), advantages)
    reference, _ = _step(policy, batch, _config(loss_aggregation="seq_mean_token_sum"), zeroed.reshape(4, 4))
    plain, _ = _step(policy, batch, _config(loss_aggregation="seq_mean_token_sum"), advantages)
    torch.testing.assert_close(masked, reference, rtol=0, atol=0)
    assert (masked - plain).abs().max() > 1e-4  # the truncated rows did carry gradient
    lengths = batch.completion_mask.sum(dim=1).float()
    assert metrics["loss/masked_truncated"] == pytest.approx(float(lengths[TRUNCATED_ROWS].sum() / lengths.sum()))
    assert metrics["loss/trained_sequences"] == 16 - len(TRUNCATED_ROWS)


def test_mask_truncated_under_token_mean_rescales_the_kept_rows_only(setup) -> None:
    # token_mean divides by the tokens that count: the kept rows' gradient is the zero-advantage update's, scaled
    # by (all tokens) / (kept tokens).
    policy, batch = setup
    advantages = compute_advantages("grpo", batch.rewards)
    zeroed = advantages.clone().reshape(-1)
    zeroed[TRUNCATED_ROWS] = 0.0
    masked, _ = _step(policy, batch, _config(mask_truncated_completions=True), advantages)
    reference, _ = _step(policy, batch, _config(), zeroed.reshape(4, 4))
    lengths = batch.completion_mask.sum(dim=1).float()
    scale = float(lengths.sum() / (lengths.sum() - lengths[TRUNCATED_ROWS].sum()))
    assert scale > 1.05
    assert _relative_gap(masked, reference * scale) < 1e-5


def _with_trainer_logprobs(policy, batch: StepBatch, shift: float) -> StepBatch:
    """The batch with sampler log-probs = the trainer's own (pre-update) log-probs + ``shift`` on every token."""
    with torch.no_grad():
        trainer = policy_logprobs(policy.model.eval(), batch, list(range(batch.size)), _config())
    return replace(batch, sampler_logprobs=(trainer + shift) * batch.completion_mask)


def test_tis_with_matching_sampler_and_no_cap_is_no_correction(setup) -> None:
    policy, batch = setup
    batch = _with_trainer_logprobs(policy, batch, 0.0)
    corrected, metrics = _step(policy, batch, _config(sampler_is_cap=1e9))
    plain, plain_metrics = _step(policy, batch, _config())
    assert _relative_gap(corrected, plain) < 1e-5
    assert metrics["loss/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["loss/is_weight_max"] == pytest.approx(1.0, abs=1e-5)
    assert "loss/is_weight_mean" not in plain_metrics


def test_tis_weight_truncated_at_the_cap_scales_the_update(setup) -> None:
    # The sampler gives every token 0.1 less log-probability: pi_trainer / pi_sampler = e^0.1 = 1.105, capped at
    # 1.05, so every token's loss (and the update) is 1.05 times the uncorrected one.
    policy, batch = setup
    batch = _with_trainer_logprobs(policy, batch, -0.1)
    corrected, metrics = _step(policy, batch, _config(sampler_is_cap=1.05))
    plain, _ = _step(policy, batch, _config())
    assert _relative_gap(corrected, 1.05 * plain) < 1e-5
    # a float32 sum of one weight per token, in the order the CPU's vectorised reduction takes: off by about
    # sqrt(tokens) eps(float32) relative (tests/float_bounds.py), above pytest.approx's 1e-6 at these token counts
    tokens = int(batch.completion_mask.sum())
    assert metrics["loss/is_weight_mean"] == pytest.approx(1.05, rel=reordered_sum_gap(torch.float32, tokens, 1.0, k=4))
    assert metrics["loss/is_weight_max"] == pytest.approx(1.05)


def test_tis_without_sampler_logprobs_is_refused(setup) -> None:
    policy, batch = setup
    with pytest.raises(UserError, match="sampler_is_cap needs the sampler's log-probs"):
        _step(policy, replace(batch, sampler_logprobs=None), _config(sampler_is_cap=2.0))


@pytest.mark.parametrize("changes", [{"importance_sampling_level": "sequence"}, {"policy_loss": "cispo"},
                                     {"dual_clip_c": 3.0}, {"policy_loss": "sapo"}, {"policy_loss": "vespo"}])
def test_on_policy_first_iteration_equals_the_plain_update(setup, changes: dict) -> None:
    # With one iteration the ratio is 1: GSPO, CISPO, the dual clip, SAPO (its gate's slope at r = 1 is 1) and
    # VESPO (phi(1) = 1) all give the plain policy gradient.
    policy, batch = setup
    option, _ = _step(policy, batch, _config(**changes))
    plain, _ = _step(policy, batch, _config())
    assert _relative_gap(option, plain) < 1e-5


@pytest.mark.parametrize("changes", [{"importance_sampling_level": "sequence"}, {"policy_loss": "cispo"},
                                     {"dual_clip_c": 1.001}, {"policy_loss": "sapo"}, {"policy_loss": "vespo"}])
def test_off_policy_second_iteration_differs_from_the_plain_update(setup, changes: dict) -> None:
    # On the second iteration the ratio is no longer 1, and each option's update leaves the plain one.
    policy, batch = setup
    option, _ = _step(policy, batch, _config(num_iterations=2, lr=0.1, epsilon_low=0.01, **changes))
    plain, _ = _step(policy, batch, _config(num_iterations=2, lr=0.1, epsilon_low=0.01))
    assert _relative_gap(option, plain) > 1e-3


def test_luspo_under_gspo_aggregation_is_the_clipped_sum_over_each_sequence(setup) -> None:
    # TRL's luspo: mean over sequences of the summed token losses = the clipped loss under seq_mean_token_sum.
    policy, batch = setup
    luspo, luspo_metrics = _step(policy, batch, _config(policy_loss="luspo", loss_aggregation="seq_mean_token_mean"))
    summed, summed_metrics = _step(policy, batch, _config(loss_aggregation="seq_mean_token_sum"))
    assert _relative_gap(luspo, summed) < 1e-5
    assert luspo_metrics["loss/total"] == pytest.approx(summed_metrics["loss/total"], rel=1e-5)
    plain, _ = _step(policy, batch, _config(loss_aggregation="seq_mean_token_mean"))
    assert _relative_gap(luspo, plain) > 1e-2  # the length weighting is not nothing


def test_off_policy_mask_equals_zeroing_the_dropped_completions_advantages(setup) -> None:
    # Threshold 0: every A < 0 completion whose mean log pi_sampler - log pi is above 0 loses its policy term,
    # which under token_mean (same denominator) is the update with those advantages set to 0.
    policy, batch = setup
    advantages = compute_advantages("grpo", batch.rewards)
    with torch.no_grad():
        trainer = policy_logprobs(policy.model, batch, list(range(batch.size)), _config())
    mask = loss_mask(batch, _config())
    kl = ((batch.sampler_logprobs - trainer) * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    dropped = (advantages.reshape(-1) < 0) & (kl > 0)
    assert 0 < int(dropped.sum()) < int((advantages < 0).sum())  # the check is not vacuous
    masked, metrics = _step(policy, batch, _config(off_policy_mask_threshold=0.0), advantages)
    by_hand, _ = _step(policy, batch, _config(), torch.where(dropped.reshape(advantages.shape), 0.0, advantages))
    assert _relative_gap(masked, by_hand) < 1e-5
    share = float((mask[dropped]).sum() / mask.sum())
    assert metrics["loss/off_policy_masked"] == pytest.approx(share, rel=1e-6)
    kept, kept_metrics = _step(policy, batch, _config(off_policy_mask_threshold=1e6), advantages)
    plain, _ = _step(policy, batch, _config(), advantages)
    assert _relative_gap(kept, plain) < 1e-6 and kept_metrics["loss/off_policy_masked"] == 0


def test_entropy_bonus_subtracts_coef_times_the_token_mean_entropy(setup) -> None:
    policy, batch = setup
    config = _config(entropy_coef=0.1)
    rows = list(range(batch.size))
    with torch.no_grad():
        _, entropy = forward.unpacked_logprobs(policy.model, batch, rows, config, with_entropy=True)
    mask = loss_mask(batch, config)
    bonus = 0.1 * float((entropy * mask).sum() / mask.sum())
    _, with_bonus = _step(policy, batch, config)
    _, without = _step(policy, batch, _config())
    assert with_bonus["loss/entropy_bonus"] == pytest.approx(bonus, rel=1e-4) and bonus > 0
    assert with_bonus["loss/entropy"] == pytest.approx(bonus / 0.1, rel=1e-4)  # token_mean: the same mean
    assert with_bonus["loss/total"] == pytest.approx(without["loss/total"] - bonus, rel=1e-4, abs=1e-5)
    assert with_bonus["loss/trained_sequences"] == batch.size
    assert "loss/entropy_bonus" not in without and "loss/entropy" not in without


def test_entropy_bonus_alone_raises_the_entropy(setup) -> None:
    # Zero advantages: without the bonus nothing moves; with it every row is trained and the entropy rises.
    policy, batch = setup
    zero = torch.zeros(batch.rewards.shape)
    still, _ = _step(policy, batch, _config(lr=0.05), zero)
    assert still.abs().max() == 0
    config = _config(lr=1e-3, entropy_coef=1.0)
    model = copy.deepcopy(policy.model).train()
    optimizer = torch.optim.SGD(list(model.parameters()), lr=config.lr)
    rows, mask = list(range(batch.size)), loss_mask(batch, config)

    def mean_entropy() -> float:
        with torch.no_grad():
            _, entropy = forward.unpacked_logprobs(model, batch, rows, config, with_entropy=True)
        return float((entropy * mask).sum() / mask.sum())

    before = mean_entropy()
    update_policy(model, optimizer, batch, zero, config, lr=config.lr, max_length=CAP)
    assert mean_entropy() > before * 1.01  # +3.7% at lr 1e-3 (larger steps overshoot)


@pytest.mark.parametrize("changes", [{}, {"importance_sampling_level": "sequence"},
                                     {"policy_loss": "cispo", "cispo_ratio_min": 0.99, "cispo_ratio_max": 1.01},
                                     {"dual_clip_c": 1.001}])
def test_clip_metrics_split_by_bound(setup, changes: dict) -> None:
    # Two iterations at lr 1e-2 with a narrow range move the ratio past the bounds on the second. The dual clip
    # bites where a negative-advantage token's ratio rose above c anyway (the update pushes most of them down).
    policy, batch = setup
    config = TrainConfig(advantage="grpo", lr=1e-2, micro_batch_size=8, num_iterations=2, epsilon_low=0.01,
                         **changes)
    model = copy.deepcopy(policy.model).train()
    optimizer = torch.optim.SGD(list(model.parameters()), lr=config.lr)
    metrics = update_policy(model, optimizer, batch, compute_advantages("grpo", batch.rewards),
                            config,
                            lr=config.lr, max_length=CAP)
    low, high = metrics["loss/clip_fraction_low"], metrics["loss/clip_fraction_high"]
    assert low + high == pytest.approx(metrics["loss/clip_fraction"])
    assert metrics["loss/clip_fraction_low"] > 0 and metrics["loss/clip_fraction_high"] > 0
    assert ("loss/clip_fraction_dual" in metrics) == ("dual_clip_c" in changes)
    if "dual_clip_c" in changes:
        assert 0 < metrics["loss/clip_fraction_dual"] < 1


def test_overlong_shaping_feeds_the_estimator_shaped_rewards(setup) -> None:
    policy, batch = setup
    # the embedded model's completions are short: a buffer of 14 of the 16 tokens reaches them
    config = _config(advantage="dr_grpo", overlong_buffer=14, overlong_penalty=0.5)
    penalty = overlong_penalty(batch.lengths, max_length=CAP, buffer=14, penalty=0.5)  # [P, G]
    assert (penalty.max(axis=1) > penalty.min(axis=1)).any()  # lengths differ within a group: advantages move
    expected = compute_advantages("dr_grpo", batch.rewards + penalty)
    torch.testing.assert_close(step_advantages(batch, config, max_length=CAP), expected)
    assert not torch.equal(expected, compute_advantages("dr_grpo", batch.rewards))
    with pytest.raises(UserError, match="overlong_buffer needs the completion length cap"):
        step_advantages(batch, config)
    _, metrics = _step(policy, batch, config, expected)
    assert metrics["rollout/overlong_penalty"] == pytest.approx(float(penalty.mean()))


def test_a_run_with_every_option_logs_what_each_did(tmp_path) -> None:
    # Through the trainer: the overlong shaping gets the task's token cap, every option's metric is logged.
    config = TrainConfig(advantage="batch_std", steps=2, prompts_per_step=4, num_iterations=2,
                         importance_sampling_level="sequence", dual_clip_c=3.0, mask_truncated_completions=True,
                         overlong_buffer=8, sampler_is_cap=2.0, eval_start=False, eval_samples=0, eval_limit=4,
                         progress=False, threads=1)
    train(config, tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        for key in ("loss/clip_fraction_low", "loss/clip_fraction_high", "loss/clip_fraction_dual",
                    "loss/masked_truncated", "rollout/overlong_penalty"):
            assert np.isfinite(row[key]), key
        assert row["rollout/overlong_penalty"] < 0  # the embedded task's completions reach into an 8-token buffer
        if row["loss/trained_sequences"] > 0:
            assert 0 < row["loss/is_weight_mean"] <= row["loss/is_weight_max"] <= 2.0  # truncated at the cap
