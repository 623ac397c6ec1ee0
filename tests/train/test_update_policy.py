"""``grpolab.train.update.update_policy``, the loss and masking core of a step, on tiny models with gradients
computed by hand or by a plain per-row loop.

* Hand-computed: a unigram policy (logits = theta, no context) at theta = 0, so that the gradient of a token's
  log-prob is onehot(token) - 1/V and every mode's loss and gradient can be written down.
* Plain loop: a context model (logits = bias + sum of the embeddings of the attended tokens so far) whose
  rows are forwarded one at a time without any padding; the update's padded, masked, micro-batched and
  row-skipping forward must give the same loss and gradient in every aggregation mode.

On-policy (one iteration, beta = 0) the ratio is exactly 1, so the loss of a token is -A and its gradient
-A * grad log p; the aggregation modes differ only in the weight w of each token (``grpolab.losses``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from grpolab.config import TrainConfig
from grpolab.losses import AGGREGATION_MODES
from grpolab.train.batch import StepBatch
from grpolab.train.update import trained_rows, update_policy

pytestmark = pytest.mark.fast

V = 5  # vocabulary
PAD = 0  # the pad token; the context model gives it a large embedding, so an unmasked pad changes the logits


class Unigram(torch.nn.Module):
    """logits = theta at every position, whatever the context."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(V))

    def forward(self, input_ids, attention_mask, position_ids=None, logits_to_keep=0, use_cache=False):
        logits = self.theta.expand(*input_ids.shape, V)
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class BagOfTokens(torch.nn.Module):
    """logits at position i = bias + sum of W[token j] over the attended positions j <= i; records the rows
    it is asked to forward."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.bias = torch.nn.Parameter(torch.randn(V, generator=generator) * 0.3)
        self.embed = torch.nn.Parameter(torch.randn(V, V, generator=generator) * 0.3)
        with torch.no_grad():
            self.embed[PAD] += torch.linspace(-3.0, 3.0, V)
        self.forwarded: list[int] = []

    def forward(self, input_ids, attention_mask, position_ids=None, logits_to_keep=0, use_cache=False):
        self.forwarded.append(input_ids.shape[0])
        states = (self.embed[input_ids] * attention_mask[..., None].to(self.embed.dtype)).cumsum(dim=1)
        logits = self.bias + states
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


def _batch(prompts: list[list[int]], completions: list[list[int]], group_size: int) -> StepBatch:
    """A StepBatch with left-padded prompts and right-padded completions (both padded with PAD)."""
    lp, t = max(map(len, prompts)), max(map(len, completions))
    prompt_ids = torch.tensor([[PAD] * (lp - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (lp - len(p)) + [1] * len(p) for p in prompts])
    completion_ids = torch.tensor([c + [PAD] * (t - len(c)) for c in completions])
    completion_mask = torch.tensor([[1] * len(c) + [0] * (t - len(c)) for c in completions])
    rows = len(prompts)
    return StepBatch(problems=[None] * (rows // group_size), prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                     completion_ids=completion_ids, completion_mask=completion_mask,
                     rewards=np.zeros((rows // group_size, group_size)), texts=[""] * rows,
                     truncated=torch.zeros(rows, dtype=torch.bool), entropy=torch.zeros(rows, t))


def _update(model: torch.nn.Module, batch: StepBatch, advantages: torch.Tensor, *, max_length: int = 4,
            **overrides) -> tuple[dict, dict[str, torch.Tensor]]:
    """One update with plain SGD and no gradient clipping; (metrics, the gradient of every parameter)."""
    config = TrainConfig(**{"max_grad_norm": 0.0, **overrides})
    optimizer = torch.optim.SGD(list(model.parameters()), lr=0.0)
    metrics = update_policy(model, optimizer, batch, advantages, config,
                            lr=0.0, max_length=max_length)
    return metrics, {name: p.grad.clone() for name, p in model.named_parameters()}


# ---------------------------------------------------------------------------- hand-computed


# One group of G = 2: completion 0 is [2, 3] (2 tokens), completion 1 is [1, 1, 4] (3 tokens); T = 3, pads
# after; advantages A = [1.0, -0.5]; max_length 4. Token weights w of each mode (N = 5 tokens, B = 2 rows):
HAND_WEIGHTS = {
    "token_mean": [1 / 5, 1 / 5],  # 1 / N
    "seq_mean_token_mean": [1 / 4, 1 / 6],  # 1 / (B * length_b)
    "seq_mean_token_sum_norm": [1 / 8, 1 / 8],  # 1 / (B * max_length)
    "seq_mean_token_sum": [1 / 2, 1 / 2],  # 1 / B
}
HAND_COUNTS = [[0, 0, 1, 1, 0], [0, 2, 0, 0, 1]]  # token histograms of the two completions
HAND_LENGTHS = [2, 3]
HAND_ADVANTAGES = [1.0, -0.5]


def _float32_atol(expected) -> float:
    """The float32 gradient against float64 hand values: each entry sums the log-softmax over V and the 5 tokens'
    terms in float32, so it may be off by (V + 5) eps(float32) of the largest entry (not a fixed sub-ulp 1e-7)."""
    return (V + 5) * float(np.finfo(np.float32).eps) * max(float(np.abs(expected).max()), 1.0)


def _hand_batch() -> StepBatch:
    return _batch([[3, 1], [3, 1]], [[2, 3], [1, 1, 4]], group_size=2)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_loss_and_gradient_of_each_mode_equal_the_hand_computed_ones(mode: str) -> None:
    # loss = sum_b w_b * length_b * (-A_b); d log p(v) / d theta = onehot(v) - 1/V at theta = 0, so
    # grad = -sum_b A_b * w_b * (counts_b - length_b / V).
    w = HAND_WEIGHTS[mode]
    loss = sum(-a * wb * n for a, wb, n in zip(HAND_ADVANTAGES, w, HAND_LENGTHS, strict=True))
    grad = -sum(a * wb * (np.array(c) - n / V)
                for a, wb, c, n in zip(HAND_ADVANTAGES, w, HAND_COUNTS, HAND_LENGTHS, strict=True))
    metrics, grads = _update(Unigram(), _hand_batch(), torch.tensor([HAND_ADVANTAGES]), loss_aggregation=mode)
    assert metrics["loss/total"] == pytest.approx(loss, abs=1e-7)
    np.testing.assert_allclose(grads["theta"].numpy(), grad, atol=_float32_atol(grad))
    assert metrics["loss/grad_norm"] == pytest.approx(float(np.linalg.norm(grad)), rel=1e-6)
    assert metrics["loss/train_tokens"] == 5 and metrics["loss/trained_sequences"] == 2


def test_the_token_mean_case_written_out() -> None:
    # -(1/5) * [1 * ([0,0,1,1,0] - 2/5) - 0.5 * ([0,2,0,0,1] - 3/5)] = -(1/5) * [-0.1, -1.1, 0.9, 0.9, -0.6]
    metrics, grads = _update(Unigram(), _hand_batch(), torch.tensor([HAND_ADVANTAGES]))
    np.testing.assert_allclose(grads["theta"].numpy(), [0.02, 0.22, -0.18, -0.18, 0.12], atol=_float32_atol(0.22))
    assert metrics["loss/total"] == pytest.approx(-0.1, abs=1e-7)  # -(1 * 2 - 0.5 * 3) / 5


def test_per_token_advantages_weigh_each_token() -> None:
    # per-token A [B, T]; the pad position of row 0 carries an advantage that the mask must drop.
    advantages = torch.tensor([[1.0, 2.0, 9.0], [-1.0, 0.5, 0.0]])
    # token_mean, w = 1/5: grad = -(1/5) * sum_bt A_bt (onehot(x_bt) - 1/5)
    expected = -(1 / 5) * (1.0 * (np.eye(V)[2] - 0.2) + 2.0 * (np.eye(V)[3] - 0.2) - 1.0 * (np.eye(V)[1] - 0.2)
                           + 0.5 * (np.eye(V)[1] - 0.2) + 0.0 * (np.eye(V)[4] - 0.2))
    metrics, grads = _update(Unigram(), _hand_batch(), advantages)
    np.testing.assert_allclose(grads["theta"].numpy(), expected, atol=_float32_atol(expected))
    assert metrics["loss/total"] == pytest.approx(-(1.0 + 2.0 - 1.0 + 0.5) / 5, abs=1e-7)


# ---------------------------------------------------------------------------- against a plain loop

# Two groups of G = 3 with prompts of different lengths (left padding) and completions of different
# lengths (right padding), including a one-token completion.
PROMPTS = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [4], [4], [4]]
COMPLETIONS = [[2, 2, 1, 4], [3], [4, 1], [1, 3, 3], [2, 4, 4, 4], [1]]
MAX_LENGTH = 5


def _loop_loss(model: BagOfTokens, advantages: torch.Tensor, mode: str) -> torch.Tensor:
    """The loss of the whole batch row by row, each row forwarded alone and unpadded, with the weights of
    ``mode`` written out; ``advantages`` [B] or [B, T]."""
    rows = len(PROMPTS)
    tokens = sum(map(len, COMPLETIONS))
    total = torch.zeros(())
    for b, (prompt, completion) in enumerate(zip(PROMPTS, COMPLETIONS, strict=True)):
        ids = torch.tensor([prompt + completion])
        logits = model(ids, torch.ones_like(ids)).logits[0]  # [L, V]
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1).gather(1, ids[0, len(prompt):, None])[:, 0]
        ratio = torch.exp(logp - logp.detach())  # 1, with the gradient of log p
        a = advantages[b, : len(completion)] if advantages.dim() == 2 else advantages[b]
        weight = {"token_mean": 1 / tokens, "seq_mean_token_mean": 1 / (rows * len(completion)),
                  "seq_mean_token_sum_norm": 1 / (rows * MAX_LENGTH), "seq_mean_token_sum": 1 / rows}[mode]
        total = total + (-a * ratio).sum() * weight
    return total


def _loop_gradient(advantages: torch.Tensor, mode: str) -> tuple[float, dict[str, torch.Tensor]]:
    model = BagOfTokens()
    loss = _loop_loss(model, advantages, mode)
    loss.backward()
    return float(loss.detach()), {name: p.grad.clone() for name, p in model.named_parameters()}


OUTCOME = torch.tensor([[1.0, -0.5, 0.25], [0.0, 2.0, -1.5]])  # [P, G]
PER_TOKEN = torch.tensor([[0.5, -1.0, 2.0, 1.0], [1.5, 7.0, 7.0, 7.0], [-0.5, 0.25, 7.0, 7.0],
                          [1.0, 1.0, -2.0, 7.0], [0.0, 0.5, 0.5, 0.5], [-1.0, 7.0, 7.0, 7.0]])  # [B, T]; 7 at pads


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("advantages", [OUTCOME, PER_TOKEN], ids=["outcome", "per-token"])
@pytest.mark.parametrize("micro_batch_size", [1, 2, 4, 64])
def test_padded_masked_micro_batched_update_equals_the_plain_loop(mode: str, advantages: torch.Tensor,
                                                                   micro_batch_size: int) -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    loss, expected = _loop_gradient(advantages.reshape(6, -1).squeeze(1), mode)
    metrics, grads = _update(BagOfTokens(), batch, advantages, max_length=MAX_LENGTH, loss_aggregation=mode,
                             micro_batch_size=micro_batch_size)
    assert metrics["loss/total"] == pytest.approx(loss, abs=1e-6)
    for name, grad in expected.items():
        assert grad.abs().max() > 1e-3, name  # the case is not degenerate
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_one_micro_batch_and_many_give_the_same_gradient(mode: str) -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    whole = _update(BagOfTokens(), batch, OUTCOME, loss_aggregation=mode, micro_batch_size=64)
    for size in (1, 2, 3, 5):
        model = BagOfTokens()
        split = _update(model, batch, OUTCOME, loss_aggregation=mode, micro_batch_size=size)
        assert len(model.forwarded) == -(-5 // size) and sum(model.forwarded) == 5  # 5 rows carry signal
        assert split[0]["loss/total"] == pytest.approx(whole[0]["loss/total"], abs=1e-6)
        for name, grad in whole[1].items():
            torch.testing.assert_close(split[1][name], grad, atol=1e-6, rtol=1e-5)


# ---------------------------------------------------------------------------- skipped rows


def test_rows_with_zero_advantage_are_not_forwarded_when_beta_is_zero() -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    advantages = torch.tensor([[1.0, 0.0, 0.25], [0.0, 0.0, -1.5]])  # rows 1, 3, 4 carry nothing
    model = BagOfTokens()
    metrics, grads = _update(model, batch, advantages, micro_batch_size=1)
    assert model.forwarded == [1, 1, 1]
    assert metrics["loss/trained_sequences"] == 3
    assert metrics["loss/train_tokens"] == len(COMPLETIONS[0]) + len(COMPLETIONS[2]) + len(COMPLETIONS[5])
    _, expected = _loop_gradient(advantages.reshape(-1), "token_mean")  # every row, zeros included
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-5)


def test_per_token_rows_whose_advantage_is_zero_on_every_completion_token_are_skipped() -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    advantages = torch.zeros(6, 4)
    advantages[1, 1:] = 3.0  # row 1 has one token: everything here is padding
    advantages[4, 3] = 1.0  # row 4's last token
    assert trained_rows(batch, advantages, TrainConfig()) == [4]
    assert trained_rows(batch, advantages, TrainConfig(beta=0.1)) == list(range(6))


def test_with_a_kl_term_every_row_is_forwarded() -> None:
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    model, reference = BagOfTokens(), BagOfTokens(seed=1)
    config = TrainConfig(beta=0.1, max_grad_norm=0.0, micro_batch_size=64)
    optimizer = torch.optim.SGD(list(model.parameters()), lr=0.0)
    metrics = update_policy(model, optimizer, batch, torch.zeros(2, 3), config,
                            lr=0.0, max_length=MAX_LENGTH,
                            reference=reference)
    assert metrics["loss/trained_sequences"] == 6 and metrics["loss/kl"] > 0
    assert model.forwarded == [6] and model.bias.grad.abs().max() > 0  # the KL term alone has a gradient


def test_without_a_kl_term_no_kl_is_reported() -> None:
    """Was: loss/kl 0.0 at beta 0, where no reference policy exists to measure it: a policy that has moved read as
    one at KL 0 beside the TRL engine's runs, which leave the key out."""
    batch = _batch(PROMPTS, COMPLETIONS, group_size=3)
    model = BagOfTokens()
    optimizer = torch.optim.SGD(list(model.parameters()), lr=0.0)
    metrics = update_policy(model, optimizer, batch, torch.tensor([[1.0, -1.0, 0.5], [0.5, -0.5, 1.0]]),
                            TrainConfig(beta=0.0, max_grad_norm=0.0, micro_batch_size=64), lr=0.0,
                            max_length=MAX_LENGTH)
    assert "loss/kl" not in metrics and metrics["loss/trained_sequences"] == 6
