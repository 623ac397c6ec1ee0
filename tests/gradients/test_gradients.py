"""Gradient geometry: the rank-2 algebra, per-completion gradients, the CountSketch and credit assignment.

A tiny random Llama (hidden 32, 2 layers) with a character tokenizer built here; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from char_tokenizer import char_tokenizer
from grpolab.advantages import compute_advantages, info
from grpolab.config import TrainConfig
from grpolab.diagnostics import spectrum
from grpolab.engine.rollout import encode_prompts, sample, token_logprobs
from grpolab.errors import UserError
from grpolab.gradients import (
    CountSketch,
    per_completion_gradients,
    select_parameters,
    summed_policy_gradient,
    token_advantages,
)
from grpolab.gradients.geometry import analyze_gradients, decompose_group_gradient, gradient_metrics_for_step
from grpolab.metric_keys import GROUP_RANK

pytestmark = pytest.mark.fast

REWARDS = np.array([[1, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]], dtype=np.float64)  # [P=3, G=4]


@pytest.fixture(scope="module")
def policy() -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
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


@pytest.fixture(scope="module")
def rows(policy, batch) -> torch.Tensor:
    return per_completion_gradients(policy[0], batch).rows.double()  # [12, D]


def group_rows(rows: torch.Tensor, p: int) -> torch.Tensor:
    return rows.reshape(3, 4, -1)[p]


@pytest.mark.parametrize("estimator", ["dr_grpo", "grpo", "rloo"])
def test_zero_sum_group_gradient_lies_in_span_and_along_one_direction(estimator: str, rows: torch.Tensor) -> None:
    advantages = compute_advantages(estimator, REWARDS).double()
    assert info(estimator).zero_sum
    for p in (0, 1):  # the mixed groups
        found = decompose_group_gradient(group_rows(rows, p), REWARDS[p], advantages[p])
        assert found["rank2_residual"] < 1e-5
        assert found["rank1_residual"] < 1e-5  # along d = S+/n+ - S-/n- alone
        assert found["all_sum_share"] < 1e-9


def test_sign_lies_in_span_but_has_a_component_along_the_sum_of_all_gradients(rows: torch.Tensor) -> None:
    sign = compute_advantages("sign", REWARDS).double()
    dr = compute_advantages("dr_grpo", REWARDS).double()
    assert not info("sign").zero_sum and (sign.sum(dim=1) != 0).any()
    g = group_rows(rows, 1)  # rewards 1, 1, 1, 0: mean 3/4
    found = decompose_group_gradient(g, REWARDS[1], sign[1])
    assert found["rank2_residual"] < 1e-5
    assert found["rank1_residual"] > 1e-3 and found["all_sum_share"] > 1e-3
    # sign = 2 (r - mean) + (2 mean - 1): h_sign = 2 h_dr + (2 mean - 1) * sum_i g_i
    h_sign, h_dr, total = sign[1] @ g, dr[1] @ g, g.sum(dim=0)
    torch.testing.assert_close(h_sign, 2 * h_dr + 0.5 * total, rtol=1e-9, atol=1e-9)


def test_rows_equal_autograd_of_each_completion_computed_separately(policy, batch, rows: torch.Tensor) -> None:
    model = policy[0]
    params = list(select_parameters(model).values())
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    mask = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
    logprobs, _ = token_logprobs(model, ids, mask, batch.completion_ids.shape[1])  # padded batch forward
    for i in (0, 5, 11):
        grads = torch.autograd.grad((logprobs[i] * batch.completion_mask[i]).sum(), params, retain_graph=True)
        expected = torch.cat([g.reshape(-1) for g in grads]).double()
        torch.testing.assert_close(rows[i], expected, rtol=1e-4, atol=1e-6)


def test_weighted_row_sum_is_the_summed_policy_gradient(policy, batch, rows: torch.Tensor) -> None:
    advantages = compute_advantages("grpo", REWARDS)
    summed = summed_policy_gradient(policy[0], batch, advantages)
    flat = torch.cat([g.reshape(-1) for g in summed.values()]).double()
    torch.testing.assert_close(advantages.reshape(-1).double() @ rows, flat, rtol=1e-4, atol=1e-6)


def test_sketch_preserves_gram_entries() -> None:
    generator = torch.Generator().manual_seed(3)
    shapes = [(300, 200), (5000,), (80, 90)]
    k = 4096
    vectors = [[torch.randn(s, generator=generator) for s in shapes] for _ in range(6)]
    sketch = CountSketch(k, seed=0)
    exact = torch.stack([torch.cat([t.reshape(-1) for t in v]) for v in vectors]).double()
    sketched = torch.stack([sketch.project(v) for v in vectors]).double()
    norms = exact.norm(dim=1)
    error = (sketched @ sketched.T - exact @ exact.T) / (norms[:, None] * norms[None, :])
    assert float(error.abs().max()) < 4 * (2 / k) ** 0.5  # Var <= 2 |x|^2 |y|^2 / k; 4 sigma
    again = CountSketch(k, seed=0).project(vectors[0])
    assert torch.equal(again, sketched[0].float())  # seeded: the same projection every time


def test_sketched_rows_keep_the_rank2_identity_exactly(policy, batch) -> None:
    found = per_completion_gradients(policy[0], batch, sketch_dim=64, seed=7)
    assert found.rows.shape == (12, 64) and found.sketch_dim == 64
    advantages = compute_advantages("dr_grpo", REWARDS)
    result = decompose_group_gradient(found.rows.double().reshape(3, 4, -1)[0], REWARDS[0], advantages[0].double())
    assert result["rank2_residual"] < 1e-6 and result["rank1_residual"] < 1e-6


def test_token_advantages_are_constant_within_each_completion(batch) -> None:
    advantages = compute_advantages("grpo", REWARDS)
    per_token = token_advantages(advantages, batch.completion_mask)
    assert per_token.shape == batch.completion_mask.shape
    flat = advantages.reshape(-1)
    for i, row in enumerate(per_token):
        kept = row[batch.completion_mask[i].bool()]
        assert torch.all(kept == flat[i])
        assert torch.all(row[~batch.completion_mask[i].bool()] == 0)


def test_spectrum_of_gradient_matrix_equals_numpy_svd(rows: torch.Tensor) -> None:
    matrix = rows.numpy()
    got = spectrum(matrix, method="gram")
    s = np.linalg.svd(matrix, compute_uv=False)
    np.testing.assert_allclose(got["singular_values"][: len(s)], s, rtol=1e-6, atol=1e-8 * s[0])
    p = s / s.sum()
    assert got["effective_rank"] == pytest.approx(float(np.exp(-(p * np.log(p)).sum())), rel=1e-6)


def test_analyze_gradients_metrics(policy, batch) -> None:
    model = policy[0]
    dr = analyze_gradients(model, batch, compute_advantages("dr_grpo", REWARDS), rewards=REWARDS)
    sign = analyze_gradients(model, batch, compute_advantages("sign", REWARDS), rewards=REWARDS)
    for metrics in (dr, sign):
        assert metrics["grad/rank2_residual"] < 1e-5 and metrics["grad/row_sum_error"] < 1e-4
        assert metrics["grad/token_advantage_within_completion_std"] == 0.0
        assert all(np.isfinite(metrics[f"grad/{m}_effective_rank"]) for m in ("weighted", "raw", "layer"))
        assert metrics["grad/split_group_effective_rank"] <= 2.0 + 1e-9
        # the key the compare report plots is one the analysis writes (was: a key nothing wrote, so no section)
        assert 1.0 <= metrics[GROUP_RANK] <= 4.0  # G = 4 rows
    assert dr["grad/rank1_residual"] < 1e-5 and sign["grad/rank1_residual"] > 1e-3
    assert dr["grad/zero_advantage_completions"] == pytest.approx(4 / 12)  # the all-wrong group
    assert sign["grad/zero_advantage_completions"] == 0.0
    assert dr["grad/mixed_groups"] == 2.0


def test_training_hook_leaves_grads_and_mode_alone(policy, batch) -> None:
    model = policy[0]
    model.train()

    config = TrainConfig(grad_analysis_params="layers.1.")
    metrics = gradient_metrics_for_step(model, batch, compute_advantages("grpo", REWARDS), config)
    assert model.training and all(p.grad is None for p in model.parameters())
    layer1 = sum(p.numel() for n, p in model.named_parameters() if "layers.1." in n)
    assert metrics["grad/dim"] == layer1 and all(isinstance(v, float) for v in metrics.values())
    model.eval()


def test_per_token_advantages_constant_within_completions_give_the_outcome_metrics(policy, batch) -> None:
    model = policy[0]
    advantages = compute_advantages("dr_grpo", REWARDS)
    outcome = analyze_gradients(model, batch, advantages, rewards=REWARDS)
    per_token = analyze_gradients(model, batch, token_advantages(advantages, batch.completion_mask), rewards=REWARDS)
    for key, value in outcome.items():
        if key in ("grad/seconds", "grad/all_sum_share"):
            continue
        assert per_token[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    assert np.isnan(per_token["grad/all_sum_share"])  # defined through per-completion advantages only


def test_per_token_advantages_leave_the_span_of_the_group_sums(policy, batch) -> None:
    model = policy[0]
    generator = torch.Generator().manual_seed(4)
    per_token = torch.randn(batch.completion_mask.shape, generator=generator) * batch.completion_mask
    metrics = analyze_gradients(model, batch, per_token, rewards=REWARDS)
    assert metrics["grad/row_sum_error"] < 1e-4  # the weighted rows sum to one batched backward's gradient
    assert metrics["grad/token_advantage_within_completion_std"] > 0.1
    assert metrics["grad/rank2_residual"] > 1e-2  # h_p is no longer a+ S+ + a- S-
    assert np.isfinite(metrics["grad/weighted_effective_rank"])
    with pytest.raises(UserError, match="outcome rewards"):
        analyze_gradients(model, batch, per_token)  # a Rollout has no .rewards to name the groups
