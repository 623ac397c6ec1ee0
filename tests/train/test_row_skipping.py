"""The update forwards only the rows the loss gives a gradient (``grpolab.losses.rows_with_gradient``, called by
``grpolab.train.update.trained_rows``); this checks, under every loss option the config offers, that doing so
changes nothing: the same loss, gradients and parameters as forwarding every row.

The model is ``test_update_policy``'s context model (six rows, two groups of three, uneven prompts and
completions), stepped with SGD at lr 2 so that the second iteration's ratios leave the clip range.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
import torch
from tests.float_bounds import reordered_sum_gap
from tests.train.test_update_policy import COMPLETIONS, PROMPTS, BagOfTokens, _batch

from grpolab.config import TrainConfig
from grpolab.losses import AGGREGATION_MODES
from grpolab.train import forward, update
from grpolab.train.batch import StepBatch
from grpolab.train.update import loss_mask, update_policy

pytestmark = pytest.mark.fast

MAX_LENGTH = 5
TRUNCATED = [0, 4]  # row 0 carries an advantage, row 4 none
OUTCOME = torch.tensor([[1.0, 0.0, -0.75], [0.0, 0.0, 1.5]])  # [P, G]: rows 1, 3, 4 carry nothing
PER_TOKEN = torch.zeros(6, 4)
PER_TOKEN[0, :2] = torch.tensor([0.5, -1.0])
PER_TOKEN[1, 1:] = 3.0  # row 1 has one token: only padding carries an advantage
PER_TOKEN[2, 1] = -0.5
PER_TOKEN[4, 3] = 1.0  # the last token of row 4 (truncated)
PER_TOKEN[5, 0] = -1.0

# Every loss option of TrainConfig and its values; dual_clip_c only applies to the clipped objectives (clip, luspo),
# vespo takes the token ratios only. The entropy bonus gives every row with a loss token a gradient.
OPTIONS = {
    "policy_loss": ("clip", "cispo", "sapo", "luspo", "vespo"),
    "importance_sampling_level": ("token", "sequence"),
    "dual_clip_c": (None, 1.5),
    "beta": (0.0, 0.1),
    "mask_truncated_completions": (False, True),
    "sampler_is_cap": (None, 1.2),
    "loss_aggregation": AGGREGATION_MODES,
    "num_iterations": (1, 2),
    "entropy_coef": (0.0, 0.05),
    "off_policy_mask_threshold": (None, 0.35),  # mean sampler KL per row: -0.23, -0.08, 0.42, -0.29, 0.98, 0.28
}
# Two parameter updates of the forward's cumulative sums: the rounding of each gradient sum passes into the next
# iteration's forward, so k allows both iterations' gaps with a margin.
GRADIENT_K = 8.0


def _sampled_batch() -> StepBatch:
    """The batch with rows ``TRUNCATED`` truncated and the sampler's log-probs those of another model, so that
    the TIS weights differ from 1 (some above the cap)."""
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    truncated = torch.zeros(batch.size, dtype=torch.bool)
    truncated[TRUNCATED] = True
    with torch.no_grad():
        sampler = forward.policy_logprobs(BagOfTokens(seed=2), batch, list(range(batch.size)), TrainConfig())
    return replace(batch, truncated=truncated, sampler_logprobs=sampler)


def _run(batch: StepBatch, advantages: torch.Tensor, config: TrainConfig):
    """(the model after the update, with its last gradients and the row counts it forwarded; the metrics)."""
    model = BagOfTokens()
    optimizer = torch.optim.SGD(list(model.parameters()), lr=config.lr)
    reference = BagOfTokens(seed=1) if config.beta > 0 else None
    metrics = update_policy(model, optimizer, batch, advantages, config,
                            lr=config.lr, max_length=MAX_LENGTH,
                            reference=reference)
    return model, metrics


def _option_combinations() -> list[dict]:
    """Combinations of ``OPTIONS`` (and the advantage's form) such that every three values of three options
    appear together in one of them: the full product would take a dozen seconds. Greedy over the product in a
    fixed shuffled order; only clip and luspo have the dual clip, and vespo no sequence ratio."""
    options = {**OPTIONS, "advantages": ("outcome", "per_token")}
    combos = [dict(zip(options, values, strict=True)) for values in itertools.product(*options.values())]
    combos = [c for c in combos if not (c["policy_loss"] not in ("clip", "luspo") and c["dual_clip_c"] is not None)
              and not (c["policy_loss"] == "vespo" and c["importance_sampling_level"] == "sequence")]
    random.Random(0).shuffle(combos)

    def triples(combo: dict) -> set:
        return set(itertools.combinations(sorted((k, repr(v)) for k, v in combo.items()), 3))

    wanted = set().union(*map(triples, combos))
    chosen, covered = [], set()
    for combo in combos:
        if not triples(combo) <= covered:
            chosen.append(combo)
            covered |= triples(combo)
    assert covered == wanted
    return chosen


def test_skipping_rows_equals_training_every_row_under_every_loss_option(monkeypatch) -> None:
    batch = _sampled_batch()
    tokens = int(batch.completion_mask.sum())
    path = batch.prompt_ids.shape[1] + batch.completion_ids.shape[1]  # the longest cumulative sum of the forward
    for combination in _option_combinations():
        advantages = {"outcome": OUTCOME, "per_token": PER_TOKEN}[combination.pop("advantages")]
        config = TrainConfig(lr=2.0, max_grad_norm=0.0, micro_batch_size=4, **combination)
        label = f"{combination}, advantages {tuple(advantages.shape)}"
        skipped_rows = update.trained_rows(batch, advantages, config)
        skipped, skipped_metrics = _run(batch, advantages, config)
        with monkeypatch.context() as patch:
            patch.setattr(update, "trained_rows", lambda batch, advantages, config: list(range(batch.size)))
            whole, whole_metrics = _run(batch, advantages, config)
        mask = loss_mask(batch, config)
        with_tokens = [row for row in range(batch.size) if mask[row].any()]
        if config.beta > 0 or config.entropy_coef > 0:
            assert skipped_rows == with_tokens, label  # the KL term and the bonus have a gradient on every token
        else:
            assert len(skipped_rows) < len(with_tokens), label  # the check is not vacuous
        assert (sum(skipped.forwarded) < sum(whole.forwarded)) == (len(skipped_rows) < batch.size), label
        for (name, p_skip), p_whole in zip(skipped.named_parameters(), whole.parameters(), strict=True):
            moved = (p_whole.detach() - BagOfTokens().get_parameter(name).detach()).abs().max()
            assert moved > 0, label
            gap = reordered_sum_gap(torch.float32, tokens * path, moved, k=GRADIENT_K)
            torch.testing.assert_close(p_skip.grad, p_whole.grad, rtol=0.0,
                                       atol=reordered_sum_gap(torch.float32, tokens * path,
                                                              p_whole.grad.abs().max(), k=GRADIENT_K),
                                       msg=lambda m, label=label, name=name: f"{label} {name} gradient: {m}")
            torch.testing.assert_close(p_skip.detach(), p_whole.detach(), rtol=0.0, atol=gap,
                                       msg=lambda m, label=label, name=name: f"{label} {name}: {m}")
        loss_gap = reordered_sum_gap(torch.float32, tokens * path, abs(whole_metrics["loss/total"]) + 1e-3,
                                     k=GRADIENT_K)
        assert skipped_metrics["loss/total"] == pytest.approx(whole_metrics["loss/total"], abs=loss_gap), label
