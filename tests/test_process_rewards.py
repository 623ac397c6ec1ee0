"""Per-token (process) rewards: the process verifiers, characters -> tokens, and the per-token advantages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from char_tokenizer import char_tokenizer
from grpolab import verifiers
from grpolab.advantages import compute_advantages, info, token_estimators
from grpolab.errors import UserError
from grpolab.process_rewards import (
    completion_advantages,
    token_advantages,
    token_ends,
    token_rewards,
    token_rewards_of_row,
)
from grpolab.verifiers.process import MAX_EXTRA_CHARS, exact_chars, get_process_verifier, gsm8k_chars
from gsm8k_cases import GSM8K_CASES
from pathological_texts import PATHOLOGICAL

pytestmark = pytest.mark.fast

# ----------------------------------------------------------------------------------------- process verifiers


@pytest.mark.parametrize(("completion", "reference", "expected"), [
    ("1284", "1284", [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)]),
    ("1294", "1284", [(0, 1.0), (1, 1.0), (2, 0.0), (3, 1.0)]),
    (" 12\n", "1284", [(1, 1.0), (2, 1.0), (3, 0.0), (3, 0.0)]),  # two missing: 0 just after the answer
    ("12845", "1284", [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0), (4, 0.0)]),  # one too many
    ("1  2", "1 2", [(0, 1.0), (1, 1.0), (3, 1.0)]),  # a whitespace run counts once, at its first character
    ("", "12", [(0, 0.0), (0, 0.0)]),  # no answer: a 0 per reference character at the end
    ("12", "  ", None),  # nothing to compare with: unscorable, as the outcome verifier
])
def test_exact_chars_table(completion: str, reference: str, expected) -> None:
    assert exact_chars(completion, reference) == expected


@pytest.mark.parametrize(("completion", "reference", "expected"), [
    ("so the answer is 57.", "57", [(17, 1.0), (18, 1.0)]),
    ("so the answer is 58.", "57", [(17, 1.0), (18, 0.0)]),
    ("#### 1,234", "1234", [(5, 1.0), (7, 1.0), (8, 1.0), (9, 1.0)]),  # the comma is not a step
    ("#### 3.0", "3", [(5, 1.0), (6, 1.0), (7, 1.0)]),  # the right value: every character right
    ("x 5 then 12", "125", [(9, 1.0), (10, 1.0), (11, 0.0)]),  # flexible: the last number; 5 missing
    ("no number", "18", [(9, 0.0), (9, 0.0)]),
    ("#### 18", "3 and 4", None),
])
def test_gsm8k_chars_table(completion: str, reference: str, expected) -> None:
    assert gsm8k_chars(completion, reference) == expected


def _check_labels(labels, completion: str, outcome: float | None) -> None:
    """The contract of a process verifier, against the outcome verifier's reward."""
    assert (labels is None) == (outcome is None)
    if labels is None:
        return
    assert all(0 <= pos <= len(completion) and value in (0.0, 1.0) for pos, value in labels)
    assert (outcome == 1.0) == (bool(labels) and all(value == 1.0 for _, value in labels))


@pytest.mark.parametrize(("completion", "reference", "auto", "strict"), GSM8K_CASES)
def test_gsm8k_chars_agree_with_the_outcome_verifier(completion: str, reference: str, auto, strict) -> None:
    _check_labels(gsm8k_chars(completion, reference), completion, auto)
    _check_labels(get_process_verifier("gsm8k_strict")(completion, reference), completion, strict)


@pytest.mark.parametrize("label", sorted(PATHOLOGICAL))
@pytest.mark.parametrize("name", ["exact", "gsm8k", "gsm8k_strict"])
def test_process_verifiers_on_pathological_text(name: str, label: str) -> None:
    text = PATHOLOGICAL[label]
    for completion, reference in ((text, "18"), ("#### 18", text[:4000]), (text, text[:4000])):
        labels = get_process_verifier(name)(completion, reference)
        _check_labels(labels, completion, verifiers.score(name, completion, reference))
        if labels is not None:  # bounded: the reference's length plus MAX_EXTRA_CHARS
            assert len(labels) <= max(len(reference), 4 * MAX_EXTRA_CHARS) + MAX_EXTRA_CHARS


texts = st.text(st.characters(codec="utf-8"), max_size=200) | st.text("0123456789,.$-#\\{}boxed \n", max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=texts, reference=texts | st.sampled_from(["18", "#### -3", "1,234.50", "0"]))
def test_process_verifiers_never_raise_and_agree_with_the_outcome(completion: str, reference: str) -> None:
    for name in ("exact", "gsm8k", "gsm8k_strict"):
        _check_labels(get_process_verifier(name)(completion, reference), completion,
                      verifiers.score(name, completion, reference))


def test_a_verifier_without_a_process_version_is_refused() -> None:
    with pytest.raises(UserError, match="exact, gsm8k, gsm8k_strict"):
        get_process_verifier("math")


# ----------------------------------------------------------------------------------------- characters -> tokens


def test_token_rewards_of_row_by_hand() -> None:
    ends = np.array([2, 3, 3, 5])  # tokens "ab", "c", "" (zero width), "de"
    labels = [(0, 1.0), (1, 0.0), (2, 1.0), (3, 1.0), (5, 0.0)]  # position 5 = the end of the text
    got = token_rewards_of_row(labels, ends, text_length=5)
    np.testing.assert_array_equal(got, [0.5, 1.0, np.nan, 0.5])  # mean of each token's labels; NaN: none
    assert np.isnan(token_rewards_of_row([], ends, 5)).all()
    assert token_rewards_of_row(labels, np.zeros(0, dtype=np.int64), 5).shape == (0,)


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A small byte-level BPE (GPT-2 style) trained here: merges digits and splits multi-byte characters."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["12 34 1234 the answer is 46", "#### 1,234.5 héllo"] * 20, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", pad_token="<pad>")


@pytest.fixture(scope="module")
def byte_tokenizer() -> PreTrainedTokenizerFast:
    return byte_level_tokenizer()


@settings(max_examples=60, deadline=None)
@given(text=st.text("0123456789 ,.#éü€x\n", max_size=40))
def test_token_spans_cover_the_decoded_text(byte_tokenizer, text: str) -> None:
    ids = byte_tokenizer(text, add_special_tokens=False)["input_ids"] + [byte_tokenizer.eos_token_id]
    ends = token_ends(byte_tokenizer, ids)
    decoded = byte_tokenizer.decode(ids, skip_special_tokens=True)
    assert len(ends) == len(ids) and (np.diff(ends) >= 0).all() and ends[-1] == len(decoded)
    for k in range(len(ids)):  # where a token ends on a whole character, the text up to it is the text so far
        prefix = byte_tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        if "\ufffd" not in prefix:  # a character split across byte tokens goes to the token it starts in
            assert prefix == decoded[: ends[k]]


def test_token_rewards_of_a_batch() -> None:
    tokenizer = char_tokenizer()
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows = [tokenizer("1294", add_special_tokens=False)["input_ids"] + [eos],
            tokenizer("12", add_special_tokens=False)["input_ids"] + [eos, pad, pad]]
    ids = torch.tensor(rows)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    got, errors = token_rewards(tokenizer, ids, mask, ["1294", "12"], ["1284", "1284"], exact_chars)
    assert errors == 0
    expected = torch.tensor([[1, 1, 0, 1, float("nan")], [1, 1, 0, float("nan"), float("nan")]], dtype=torch.float64)
    torch.testing.assert_close(got, expected, equal_nan=True)  # the missing "84" lands on the EOS

    def broken(completion: str, reference: str):
        raise RuntimeError("boom")

    got, errors = token_rewards(tokenizer, ids, mask, ["1294", "12"], ["1284", "1284"], broken)
    assert errors == 2 and torch.isnan(got).all()


# ----------------------------------------------------------------------------------------- advantages


def _loop_advantages(name: str, rewards: np.ndarray, mask: np.ndarray, group_size: int) -> np.ndarray:
    """DeepSeekMath §4.1.3 written out: normalise a group's rewarded positions, then sum from each token on."""
    out = np.zeros_like(rewards)
    for start in range(0, rewards.shape[0], group_size):
        block = rewards[start : start + group_size]
        values = block[~np.isnan(block)]
        mean = values.mean() if values.size else 0.0
        std = values.std(ddof=1) if values.size > 1 else 0.0
        for i in range(group_size):
            for t in range(rewards.shape[1]):
                total = 0.0
                for later in range(t, rewards.shape[1]):
                    r = block[i, later]
                    if np.isnan(r):
                        continue
                    if name == "grpo":
                        total += (r - mean) / (std + 1e-4) if std > 0 else 0.0
                    elif name == "dr_grpo":
                        total += r - mean
                    else:
                        total += 2 * r - 1
                out[start + i, t] = total * mask[start + i, t]
    return out


def _random_token_rewards(seed: int, rows: int = 8, width: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=rows)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    rewards = rng.integers(0, 2, size=(rows, width)).astype(np.float64)
    rewards[(rng.random((rows, width)) < 0.5) | (mask == 0)] = np.nan
    return torch.from_numpy(rewards), torch.from_numpy(mask)


@pytest.mark.parametrize("name", token_estimators())
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_token_advantages_equal_a_plain_loop(name: str, seed: int) -> None:
    rewards, mask = _random_token_rewards(seed)
    got = token_advantages(name, rewards, mask, group_size=4)
    expected = _loop_advantages(name, rewards.numpy(), mask.numpy(), 4)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", token_estimators())
def test_all_rewards_on_the_last_token_is_outcome_advantage_broadcast(name: str) -> None:
    outcome = np.array([[1, 0, 0, 1], [1, 1, 1, 0], [0, 0, 0, 0]], dtype=np.float64)  # [P, G]
    lengths = np.array([3, 5, 1, 4, 2, 2, 5, 3, 4, 1, 2, 5])
    mask = torch.from_numpy((np.arange(5)[None, :] < lengths[:, None]).astype(np.int64))  # [B, T]
    rewards = torch.full((12, 5), float("nan"), dtype=torch.float64)
    rewards[torch.arange(12), torch.from_numpy(lengths - 1)] = torch.from_numpy(outcome.reshape(-1))
    got = token_advantages(name, rewards, mask, group_size=4)
    expected = compute_advantages(name, outcome).reshape(-1, 1).float() * mask
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(completion_advantages(got, mask, (3, 4)), compute_advantages(name, outcome).float())


@pytest.mark.parametrize("name", [name for name in token_estimators() if info(name).zero_sum])
def test_normalised_rewards_of_a_group_sum_to_zero(name: str) -> None:
    rewards, mask = _random_token_rewards(5, rows=12, width=7)
    advantages = token_advantages(name, rewards, mask, group_size=4)
    first = advantages[:, 0].reshape(3, 4)  # the first token's reward-to-go = the completion's normalised sum
    torch.testing.assert_close(first.sum(dim=1), torch.zeros(3), atol=1e-5, rtol=0)


def test_unrewarded_rows_and_padding_get_zero_and_bad_estimators_are_refused() -> None:
    rewards, mask = _random_token_rewards(6)
    rewards[:4] = float("nan")  # a group with no rewarded position
    advantages = token_advantages("grpo", rewards, mask, group_size=4)
    assert (advantages[:4] == 0).all() and (advantages[mask == 0] == 0).all()
    with pytest.raises(UserError, match=", ".join(token_estimators())):
        token_advantages("rloo", rewards, mask, group_size=4)
    with pytest.raises(ValueError, match="groups of 3"):
        token_advantages("grpo", rewards, mask, group_size=3)


def test_the_per_token_estimators_are_the_ones_the_registry_marks() -> None:
    assert set(token_estimators()) == {"grpo", "dr_grpo", "sign"}  # the published per-step forms (docstring)
    assert all("token" in info(name).granularities for name in token_estimators())


@pytest.mark.parametrize(("name", "hyperparameters", "rewards", "message"), [
    ("grpo", {}, [[1.0, float("inf")]], "'grpo': rewards contain \\+-inf"),
    ("grpo", {"std": "median"}, [[1.0, 0.0]], "'grpo': std must be 'sample' or 'population'"),
    ("grpo", {"k": 2}, [[1.0, 0.0]], "'grpo': bad hyper-parameters"),
    ("sign", {}, [[1.0, 2.0]], "'sign' takes per-token rewards in \\[0, 1\\]"),
])
def test_per_token_rewards_are_validated_like_outcome_rewards(name, hyperparameters, rewards, message) -> None:
    values = torch.tensor(rewards, dtype=torch.float64)  # [B = 2, T = 1]
    with pytest.raises(ValueError, match=message):
        token_advantages(name, values.reshape(2, 1), torch.ones(2, 1), group_size=2, **hyperparameters)


def test_a_per_token_mean_label_is_accepted_by_a_binary_only_estimator() -> None:
    rewards = torch.tensor([[0.5, float("nan")], [1.0, 0.0]], dtype=torch.float64)  # [B, T]; 0.5: half right
    advantages = token_advantages("sign", rewards, torch.ones(2, 2), group_size=2)
    torch.testing.assert_close(advantages, torch.tensor([[0.0, 0.0], [0.0, -1.0]]))  # 2r-1 to go: [0], [1-1, -1]


def test_completion_advantages_refuses_outcome_advantages() -> None:
    with pytest.raises(ValueError, match="per-token advantages"):
        completion_advantages(torch.zeros(3, 4), torch.ones(12, 5), (3, 4))
