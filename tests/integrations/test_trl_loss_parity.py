"""grpolab's own update computes TRL 1.16's losses as TRL does: on one batch of a tiny random Llama, TRL's
``GRPOTrainer._compute_loss`` and grpolab's ``policy_loss`` / ``aggregate`` / ``entropy_bonus`` (fed the same
log-probs and entropies, from TRL's own forward) give the same loss and the same parameter gradients, for sapo,
luspo, vespo, the entropy bonus and off-policy masking, off-policy (ratios away from 1)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("trl")

from grpolab.losses import LossOptions, aggregate, entropy_bonus, policy_loss

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl" / "train_grpo.py"
B, LP, T = 6, 4, 5


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    spec = importlib.util.spec_from_file_location("grpolab_trl_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return str(module.build_tiny_model(tmp_path_factory.mktemp("tiny")))


def _trainer(model_dir: str, tmp_path: Path, **config: Any) -> Any:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=B, num_generations=2,
                      max_completion_length=T, use_cpu=True, report_to=[], beta=0.0, epsilon_high=0.28, **config)
    return GRPOTrainer(model=model_dir, reward_funcs=lambda completions, **_: [0.0] * len(completions), args=args,
                       train_dataset=Dataset.from_dict({"prompt": ["a b"] * 4}))


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    completion_mask = torch.ones(B, T, dtype=torch.long)
    completion_mask[1, 3:] = 0
    completion_mask[4, 2:] = 0
    return {"prompt_ids": torch.randint(3, 20, (B, LP), generator=generator),
            "prompt_mask": torch.ones(B, LP, dtype=torch.long),
            "completion_ids": torch.randint(3, 20, (B, T), generator=generator), "completion_mask": completion_mask,
            "advantages": torch.tensor([1.0, -1.0, 0.5, -0.5, -2.0, 0.0]),
            "num_items_in_batch": completion_mask.sum()}


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


CASES = {
    "sapo": ({"loss_type": "sapo", "sapo_temperature_neg": 1.3}, {"objective": "sapo", "sapo_temperature_neg": 1.3},
             "seq_mean_token_mean", 0.0),
    "luspo": ({"loss_type": "luspo", "importance_sampling_level": "sequence"},
              {"objective": "luspo", "importance_sampling_level": "sequence"}, "seq_mean_token_mean", 0.0),
    "vespo": ({"loss_type": "vespo", "vespo_k_neg": 2.5}, {"objective": "vespo", "vespo_k_neg": 2.5},
              "token_mean", 0.0),
    "clip+entropy": ({"loss_type": "dapo", "entropy_coef": 0.2}, {}, "token_mean", 0.2),
    "clip+off-policy": ({"loss_type": "dapo", "off_policy_mask_threshold": 0.05}, {"off_policy_mask_threshold": 0.05},
                        "token_mean", 0.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_grpolabs_loss_and_gradient_equal_trls(case: str, tiny_model: str, tmp_path: Path) -> None:
    trl_args, ours, aggregation, coef = CASES[case]
    trainer = _trainer(tiny_model, tmp_path, **trl_args)
    model = trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = _batch()
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        current, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, T)
    noise = torch.randn(B, T, generator=torch.Generator().manual_seed(1)) * 0.3
    inputs["old_per_token_logps"] = current + noise  # ratios away from 1: the losses' shapes matter

    theirs = trainer._compute_loss(model, inputs)
    theirs.backward()
    trl_grads = _grads(model).clone()
    model.zero_grad()

    logprobs, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, T, compute_entropy=True)
    mask = inputs["completion_mask"].float()
    options = LossOptions(epsilon_low=0.2, epsilon_high=0.28, **ours)
    terms = policy_loss(logprobs, inputs["old_per_token_logps"], inputs["advantages"], options, mask=mask)
    if "off_policy_mask_threshold" in ours:
        assert 0 < float((terms.off_policy_masked * mask).sum()) < float(mask.sum())  # some completions dropped
    loss = aggregate(terms.loss, mask, aggregation)
    if coef:
        loss = loss - entropy_bonus(entropy, mask, aggregation, coef)
    loss.backward()
    assert loss.item() == pytest.approx(theirs.item(), rel=1e-5, abs=1e-6)
    ours_grads = _grads(model)
    assert trl_grads.abs().max() > 0
    torch.testing.assert_close(ours_grads, trl_grads, rtol=1e-4, atol=1e-6)
