"""The half-batch gradient cosine (``grpolab.gradients.halves``): identical halves, a sign flip, whole groups only.

A tiny random Llama (hidden 32, 2 layers) with a character tokenizer built here; nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from char_tokenizer import char_tokenizer
from grpolab.advantages import compute_advantages
from grpolab.config import TrainConfig
from grpolab.engine.rollout import encode_prompts, sample
from grpolab.errors import UserError
from grpolab.gradients import half_batch_cosine, half_rows, summed_policy_gradient, token_advantages
from grpolab.gradients.geometry import gradient_metrics_for_step

pytestmark = pytest.mark.fast

REWARDS = np.array([[1, 0, 0, 1], [1, 1, 1, 0], [0, 1, 0, 0]], dtype=np.float64)  # [P=3, G=4]


@dataclass
class Rows:
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    tokenizer = char_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return LlamaForCausalLM(config).eval(), tokenizer


@pytest.fixture(scope="module")
def batch(policy):
    model, tokenizer = policy
    ids, mask = encode_prompts(tokenizer, ["1+2=", "12*3=", "7-9="], use_chat_template=False)
    return sample(model, tokenizer, ids, mask, num_samples=4, max_new_tokens=6,
                  generator=torch.Generator().manual_seed(1))


def rows_of(batch, rows: slice) -> Rows:
    return Rows(batch.prompt_ids[rows], batch.prompt_mask[rows], batch.completion_ids[rows],
                batch.completion_mask[rows])


def flat(grads: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1).double() for g in grads.values()])


def test_the_halves_are_whole_groups() -> None:
    assert half_rows(3, 4) == (slice(0, 4), slice(4, 12))
    assert half_rows(4, 2) == (slice(0, 4), slice(4, 8))
    assert half_rows(2, 1) == (slice(0, 1), slice(1, 2))
    with pytest.raises(UserError, match="at least 2 prompt groups"):
        half_rows(1, 8)  # one group is never split inside


def test_identical_halves_give_cosine_one(policy, batch) -> None:
    first = rows_of(batch, slice(4, 8))  # one group of 4
    doubled = Rows(*(torch.cat([t, t]) for t in (first.prompt_ids, first.prompt_mask, first.completion_ids,
                                                   first.completion_mask)))
    advantages = compute_advantages("sign", REWARDS[1:2]).repeat(2, 1)  # [2, 4]: the same group twice
    assert half_batch_cosine(policy[0], doubled, advantages) == pytest.approx(1.0, abs=1e-6)


def test_negating_one_half_flips_the_sign(policy, batch) -> None:
    advantages = compute_advantages("dr_grpo", REWARDS)  # [3, 4]
    cosine = half_batch_cosine(policy[0], batch, advantages)
    flipped = advantages.clone()
    flipped[1:] = -flipped[1:]  # the second half: groups 1 and 2
    assert abs(cosine) > 1e-3
    assert half_batch_cosine(policy[0], batch, flipped) == pytest.approx(-cosine, rel=1e-5, abs=1e-7)


def test_it_is_the_cosine_between_whole_group_gradients(policy, batch) -> None:
    model = policy[0]
    advantages = compute_advantages("sign", REWARDS)
    first = flat(summed_policy_gradient(model, rows_of(batch, slice(0, 4)), advantages[:1]))
    second = flat(summed_policy_gradient(model, rows_of(batch, slice(4, 12)), advantages[1:]))
    expected = float(first @ second / (first.norm() * second.norm()))
    assert half_batch_cosine(model, batch, advantages) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    # a split inside a group (rows 0-5 against 6-11) is another number
    inside = [flat(summed_policy_gradient(model, rows_of(batch, rows), token_advantages(
        advantages, batch.completion_mask)[rows])) for rows in (slice(0, 6), slice(6, 12))]
    assert abs(float(inside[0] @ inside[1] / (inside[0].norm() * inside[1].norm())) - expected) > 1e-3


def test_per_token_advantages_need_the_group_size_and_agree_with_outcome_ones(policy, batch) -> None:
    model = policy[0]
    advantages = compute_advantages("dr_grpo", REWARDS)
    per_token = token_advantages(advantages, batch.completion_mask)  # [B, T], constant within completions
    with pytest.raises(UserError, match="group_size"):
        half_batch_cosine(model, batch, per_token)
    assert half_batch_cosine(model, batch, per_token, group_size=4) == pytest.approx(
        half_batch_cosine(model, batch, advantages), rel=1e-5, abs=1e-7)


def test_a_half_without_gradient_gives_nan(policy, batch) -> None:
    advantages = compute_advantages("dr_grpo", REWARDS)
    advantages[:1] = 0.0  # the first half's only group carries no advantage
    assert math.isnan(half_batch_cosine(policy[0], batch, advantages))


def test_the_training_hook_can_measure_the_halves_alone(policy, batch) -> None:
    model = policy[0]
    model.train()
    advantages = compute_advantages("sign", REWARDS)
    alone = gradient_metrics_for_step(model, batch, advantages, TrainConfig(group_size=4,
                                                                           grad_analysis_parts="half_batch"))
    assert list(alone) == ["grad/half_batch_cosine"]
    assert alone["grad/half_batch_cosine"] == pytest.approx(half_batch_cosine(model, batch, advantages), abs=1e-7)
    both = gradient_metrics_for_step(model, batch, advantages, TrainConfig(group_size=4,
                                                                          grad_analysis_params="layers.1."))
    assert "grad/half_batch_cosine" in both and "grad/effective_rank" not in alone and "grad/dim" in both
    assert model.training and all(p.grad is None for p in model.parameters())
    model.eval()


def test_a_run_logs_the_cosine_alone_on_every_step(tmp_path) -> None:
    from grpolab.train import train
    from grpolab.train.runlog import read_metrics

    config = TrainConfig(advantage="sign", steps=2, prompts_per_step=4, group_size=2, eval_start=False,
                         eval_samples=0, eval_limit=4, checkpoint_every=0, progress=False, threads=1,
                         grad_analysis_every=1, grad_analysis_parts="half_batch")
    train(config, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert [key for key in row if key.startswith("grad/")] == ["grad/half_batch_cosine"]
        assert -1.0 <= row["grad/half_batch_cosine"] <= 1.0  # sign: every completion carries gradient


def test_the_summed_gradient_is_the_updates_packed_forward_and_equals_the_padded_one(
        policy, batch, monkeypatch: pytest.MonkeyPatch) -> None:
    """``summed_policy_gradient`` forwards each prompt once with its completions packed behind it, as the update
    does; with packing refused it runs the padded forward, and the two agree within the float32 bound of
    ``tests.float_bounds`` (k = 16 for a gradient, as in tests/engine/test_lean_forward.py)."""
    from tests.float_bounds import reordered_sum_gap

    from grpolab.engine import prefix_packing

    model, advantages = policy[0], compute_advantages("dr_grpo", REWARDS)
    calls = []
    packed_logprobs = prefix_packing.logprobs
    monkeypatch.setattr(prefix_packing, "logprobs", lambda *a, **k: calls.append(1) or packed_logprobs(*a, **k))
    packed = summed_policy_gradient(model, batch, advantages)
    assert calls == [1]
    monkeypatch.setattr(prefix_packing, "logprobs", lambda *a, **k: None)
    padded = summed_policy_gradient(model, batch, advantages)
    config = model.config
    positions = batch.prompt_ids.shape[1] + 4 * batch.completion_ids.shape[1]  # the longest packed sequence
    terms = (config.num_hidden_layers * (5 * config.hidden_size + positions + config.intermediate_size)
             + 2 * config.hidden_size + config.vocab_size)
    assert padded.keys() == packed.keys()
    for name, grad in padded.items():
        assert (packed[name] - grad).abs().max() <= reordered_sum_gap(torch.float32, terms, grad.abs().max(), k=16)
    assert float(flat(padded).norm()) > 0


def test_under_bfloat16_the_hook_still_measures_in_float32(policy, batch) -> None:
    """dtype bfloat16 (the update in bfloat16 autocast): the training hook's cosine is the float32 one; the one
    computed in autocast is another number (the logits' rounding adds noise of its own to each half)."""
    model, advantages = policy[0], compute_advantages("dr_grpo", REWARDS)
    config = TrainConfig(group_size=4, grad_analysis_parts="half_batch", dtype="bfloat16")
    hooked = gradient_metrics_for_step(model, batch, advantages, config)["grad/half_batch_cosine"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = half_batch_cosine(model, batch, advantages)
    assert hooked == half_batch_cosine(model, batch, advantages)
    assert hooked != autocast
