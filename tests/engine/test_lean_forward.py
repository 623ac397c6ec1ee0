"""The lean training forward (``lean_forward``) against the transformers forward it replaces in
``rollout.token_logprobs``, and prefix packing (``prefix_packing``, the update's forward) against the padded
forward.

Tolerances, float32, derived from the sums rather than measured on one CPU (``tests.float_bounds``): the two
forwards sum the same terms in different orders (fused q/k/v and gate/up matmuls, the fused RMS norm, a packed
layout with other matmul shapes), so logits and log-probs may differ by ``eps * sqrt(n) * m``, ``n`` the terms
summed along the path to one logit (``_path_terms``: 2,130 for the embedded model, packed) and ``m`` the largest
reference value compared (k = 1), at every position after a row's first real token; each parameter's gradient
by ``16 * eps * sqrt(n)`` of its largest reference entry (k = 16: the backward walks the path again, through
the softmax's and the norms' derivatives; for the embedded model about the 1e-4 this file used to state).
Measured against these bounds, log-probs and gradients at most 0.05 of theirs, on an AMD EPYC (AVX-512) with
the default kernels and with ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=default``; the packed embedded
log-probs once reached 1.14e-5 (0.07 of the bound) on an Intel CPU with AMX. Masked positions of the packed
forward are exactly 0.
"""

from __future__ import annotations

import pytest
import torch
from tests.float_bounds import reordered_sum_gap
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from grpolab.config import TrainConfig
from grpolab.engine import lean_forward, prefix_packing
from grpolab.engine.rollout import _positions, token_logprobs
from grpolab.models import load_policy
from grpolab.train.batch import StepBatch
from grpolab.train.forward import policy_logprobs

pytestmark = pytest.mark.fast

VOCAB = 32
KEEP = 7
GRADIENT_K = 16  # the backward's gap, in units of the forward's (see the module docstring)


def _path_terms(model: torch.nn.Module, positions: int) -> int:
    """The terms summed along the path to one logit: per layer two RMS norms, the q/k/v projection and the
    gate/up projection (hidden each), attention over ``positions``, the output and down projections (hidden,
    intermediate); then the final norm, the head (hidden) and the log-softmax (vocab)."""
    config = model.config
    per_layer = 4 * config.hidden_size + positions + config.hidden_size + config.intermediate_size
    return config.num_hidden_layers * per_layer + 2 * config.hidden_size + config.vocab_size


def _forward_gap(model: torch.nn.Module, positions: int, reference: torch.Tensor) -> float:
    """The largest gap allowed between two float32 forwards' values of which ``reference`` holds one."""
    return reordered_sum_gap(torch.float32, _path_terms(model, positions), reference.abs().max())


def _gradient_gap(model: torch.nn.Module, positions: int, reference: torch.Tensor) -> float:
    return reordered_sum_gap(torch.float32, _path_terms(model, positions), reference.abs().max(), k=GRADIENT_K)


@pytest.fixture(scope="module")
def embedded():
    torch.set_num_threads(1)
    return load_policy("embedded").model


def _random_llama(*, kv_heads: int, tied: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=16,
                         max_position_embeddings=128, tie_word_embeddings=tied, pad_token_id=0)
    return LlamaForCausalLM(config)


def _lora(model: torch.nn.Module) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj",
                                                                                 "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # peft starts B at 0: make the adapters change the outputs
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """ids, mask [6, 16]: left-padded prompts of different lengths, completions ending at different
    places (right padding), one row with neither."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (6, 16), generator=generator)
    mask = torch.ones_like(ids)
    for row, (lead, end) in enumerate([(0, 16), (3, 16), (5, 12), (1, 10), (8, 14), (2, 16)]):
        mask[row, :lead] = 0
        mask[row, end:] = 0
    return ids, mask


def _reference(model, ids, mask, keep=KEEP) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=mask, position_ids=_positions(mask), logits_to_keep=keep,
                 use_cache=False).logits


def _valid(mask: torch.Tensor, keep=KEEP) -> torch.Tensor:
    """[B, keep] positions after each row's first real token (left padding's logits are unused)."""
    return (mask.cumsum(dim=1) > 0)[:, -keep:]


def _models():
    return {
        "embedded": lambda: load_policy("embedded").model,
        "gqa-untied": lambda: _random_llama(kv_heads=2, tied=False),
        "mqa-tied": lambda: _random_llama(kv_heads=1, tied=True),
        "lora-gqa": lambda: _lora(_random_llama(kv_heads=2, tied=False)),
        "lora-embedded": lambda: _lora(load_policy("embedded").model),
    }


@pytest.mark.parametrize("name", list(_models()))
def test_logits_equal_the_transformers_forward(name: str) -> None:
    model = _models()[name]()
    assert lean_forward.supports(model)
    ids, mask = _batch()
    with torch.no_grad():
        lean = lean_forward.logits(model, ids, mask, _positions(mask), KEEP)
        reference = _reference(model, ids, mask)
    valid = _valid(mask)
    assert (lean - reference)[valid].abs().max() <= _forward_gap(model, ids.shape[1], reference[valid])


@pytest.mark.parametrize("name", list(_models()))
def test_gradients_equal_the_transformers_backward(name: str) -> None:
    model = _models()[name]()
    ids, mask = _batch()
    weights = torch.randn(ids.shape[0], KEEP, generator=torch.Generator().manual_seed(2)) * _valid(mask)

    def grads(forward) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        logprobs = torch.log_softmax(forward(), dim=-1).gather(-1, ids[:, -KEEP:, None]).squeeze(-1)
        (logprobs * weights).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    lean = grads(lambda: lean_forward.logits(model, ids, mask, _positions(mask), KEEP))
    reference = grads(lambda: _reference(model, ids, mask))
    assert lean.keys() == reference.keys() and lean
    if name.startswith("lora"):
        assert all("lora_" in n for n in lean)  # the adapters train, the base stays frozen
    for key, expected in reference.items():
        assert (lean[key] - expected).abs().max() <= _gradient_gap(model, ids.shape[1], expected), key


def test_token_logprobs_match_the_transformers_forward(embedded) -> None:
    ids, mask = _batch()
    t = KEEP - 1
    with torch.no_grad():
        logprobs, _ = token_logprobs(embedded, ids, mask, t)
        logits = _reference(embedded, ids, mask)[:, :-1]
    expected = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -t:, None]).squeeze(-1)
    valid = mask[:, -t:].bool()
    assert (logprobs - expected)[valid].abs().max() <= _forward_gap(embedded, ids.shape[1], expected[valid])


def test_other_architectures_fall_back_to_transformers() -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64)).eval()
    assert not lean_forward.supports(model)
    ids, mask = _batch()
    logprobs, _ = token_logprobs(model, ids, mask, 4)
    assert logprobs.shape == (6, 4) and torch.isfinite(logprobs).all()


def test_update_log_probs_skip_unused_columns_exactly(embedded, monkeypatch) -> None:
    """Where the rows cannot be packed, ``grpolab.train.forward.policy_logprobs`` forwards only the columns the chosen
    rows use; the log-probs of the real completion tokens are those of the full-width forward, and 0
    past the longest completion."""
    monkeypatch.setattr(prefix_packing, "logprobs", lambda *args, **kwargs: None)
    ids, mask = _batch()
    prompt, completion = slice(0, 9), slice(9, 16)
    batch = StepBatch(problems=[], prompt_ids=ids[:, prompt], prompt_mask=mask[:, prompt],
                      completion_ids=ids[:, completion], completion_mask=mask[:, completion],
                      rewards=None, texts=[""] * 6, truncated=torch.zeros(6, dtype=torch.bool),
                      entropy=torch.zeros(6, 7))
    rows = [2, 3]  # leading prompt columns are padding in both, the last completion columns too
    with torch.no_grad():
        trimmed = policy_logprobs(embedded, batch, rows, TrainConfig())
        full, _ = token_logprobs(embedded, ids[rows], mask[rows], 7)
    valid = mask[rows, completion].bool()
    assert trimmed.shape == full.shape
    assert (trimmed - full)[valid].abs().max() <= _forward_gap(embedded, ids.shape[1], full[valid])
    used = int(valid.any(dim=0).nonzero().max()) + 1
    assert used < 7 and (trimmed[:, used:] == 0).all()


def _groups() -> tuple[torch.Tensor, ...]:
    """Three prompts (left-padded, lengths 5, 2, 7) x G = 3 rows, completions of lengths 0..6 out of 6
    columns (right-padded; one row empty, one full)."""
    generator = torch.Generator().manual_seed(2)
    prompts = torch.randint(3, VOCAB, (3, 7), generator=generator)
    prompt_mask = torch.ones_like(prompts)
    for row, length in enumerate([5, 2, 7]):
        prompt_mask[row, : 7 - length] = 0
        prompts[row, : 7 - length] = 0
    prompt_ids, prompt_mask = prompts.repeat_interleave(3, dim=0), prompt_mask.repeat_interleave(3, dim=0)
    completion_ids = torch.randint(3, VOCAB, (9, 6), generator=generator)
    lengths = torch.tensor([3, 6, 1, 0, 4, 2, 5, 5, 6])
    completion_mask = (torch.arange(6) < lengths[:, None]).long()
    return prompt_ids, prompt_mask, completion_ids * completion_mask, completion_mask


def _padded(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    return token_logprobs(model, ids, mask, completion_ids.shape[1], temperature=0.7)[0]


@pytest.mark.parametrize("name", ["embedded", "gqa-untied", "lora-gqa"])
def test_packed_logprobs_and_gradients_equal_the_padded_forward(name: str) -> None:
    """``prefix_packing.logprobs`` (each prompt forwarded once, its rows' completions packed behind it)."""
    model = _models()[name]()
    batch = _groups()
    completion_mask = batch[3]
    valid = completion_mask.bool()
    weights = torch.randn(valid.shape, generator=torch.Generator().manual_seed(3))
    results = []
    for forward in (_padded, lambda m, *b: prefix_packing.logprobs(m, *b, temperature=0.7)):
        model.zero_grad()
        logprobs = forward(model, *batch)
        (logprobs * weights * completion_mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logprobs.detach(), grads))
    (reference, reference_grads), (packed, packed_grads) = results
    positions = batch[0].shape[1] + 3 * batch[2].shape[1]  # the longest packed sequence: a prompt, G = 3 rows
    assert (packed - reference)[valid].abs().max() <= _forward_gap(model, positions, reference[valid])
    assert (packed[~valid] == 0).all()
    assert reference_grads.keys() == packed_grads.keys() and reference_grads
    for key, grad in reference_grads.items():
        assert (packed_grads[key] - grad).abs().max() <= _gradient_gap(model, positions, grad), key


def test_the_packing_forwards_each_prompt_once_and_no_padding() -> None:
    prompt_ids, prompt_mask, _, completion_mask = _groups()
    packing = prefix_packing._pack(prompt_ids, prompt_mask, completion_mask)
    # one sequence per prompt: its real tokens once, then its rows' completion tokens (lengths 15, 8, 23)
    assert packing.source.shape == (3, 7 + 5 + 5 + 6)
    assert packing.positions[1].tolist()[:8] == [0, 1, 2, 3, 4, 5, 2, 3]  # rows 3 (empty), 4, 5
    assert packing.targets.numel() == int(completion_mask.sum()) == 32
    assert packing.predictors.tolist()[:4] == [4, 5, 6, 4]  # row 0 from the prompt's last state, row 1 too


def test_a_completion_never_sees_another_completion_of_its_group() -> None:
    """Changing one row's completion leaves the other rows' log-probs unchanged (the tree mask)."""
    model = _random_llama(kv_heads=4, tied=True)
    prompt_ids, prompt_mask, completion_ids, completion_mask = _groups()
    with torch.no_grad():
        before = prefix_packing.logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
        changed = completion_ids.clone()
        changed[1] = (changed[1] + 1) % VOCAB * completion_mask[1]
        after = prefix_packing.logprobs(model, prompt_ids, prompt_mask, changed, completion_mask)
    others = [r for r in range(9) if r != 1]
    assert torch.equal(before[others], after[others])
    assert not torch.equal(before[1], after[1])


def test_unaccepted_models_and_masks_return_none() -> None:
    prompt_ids, prompt_mask, completion_ids, completion_mask = _groups()
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    assert prefix_packing.logprobs(gpt2, prompt_ids, prompt_mask, completion_ids, completion_mask) is None
    holey = completion_mask.clone()
    holey[1, 2] = 0  # not a prefix
    model = _random_llama(kv_heads=4, tied=True)
    assert prefix_packing.logprobs(model, prompt_ids, prompt_mask, completion_ids, holey) is None


def test_the_update_packs_with_the_padded_values() -> None:
    """``grpolab.train.forward.policy_logprobs`` on a subset of rows (a group split across micro-batches included)
    gives the padded forward's log-probs."""
    model = _random_llama(kv_heads=2, tied=False)
    prompt_ids, prompt_mask, completion_ids, completion_mask = _groups()
    batch = StepBatch(problems=[], prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                      completion_mask=completion_mask, rewards=None, texts=[""] * 9,
                      truncated=torch.zeros(9, dtype=torch.bool), entropy=torch.zeros(9, 6))
    rows = [1, 2, 3, 4, 7]
    with torch.no_grad():
        update = policy_logprobs(model, batch, rows, TrainConfig(temperature=0.7))
        reference = _padded(model, prompt_ids[rows], prompt_mask[rows], completion_ids[rows], completion_mask[rows])
    valid = completion_mask[rows].bool()
    positions = prompt_ids.shape[1] + completion_ids.shape[1]
    assert (update - reference)[valid].abs().max() <= _forward_gap(model, positions, reference[valid])
    assert (update[~valid] == 0).all()
