"""Tests for the embedded default model in ``grpolab/assets/embedded``: offline, tiny, partly competent."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpolab.tasks.arith import ALPHABET, make_task

ASSETS = Path(str(resources.files("grpolab") / "assets" / "embedded"))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(ASSETS, local_files_only=True)


@pytest.fixture(scope="module")
def model():
    loaded = AutoModelForCausalLM.from_pretrained(ASSETS, local_files_only=True)
    return loaded.eval()


def test_assets_are_small_safetensors_only() -> None:
    names = {path.name for path in ASSETS.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    assert (ASSETS / "model.safetensors").stat().st_size < 5_000_000


def test_tokenizer_round_trips_every_task_character(tokenizer) -> None:
    for char in ALPHABET:
        ids = tokenizer(char, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and ids[0] != tokenizer.unk_token_id, repr(char)
    text = "what is 12 plus 7 times 3? 33 12+7*3=-9"
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == text


def test_special_tokens(tokenizer, model) -> None:
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id}
    assert len(special) == 3 and None not in special
    assert tokenizer("1+1=")["input_ids"][0] == tokenizer.bos_token_id
    assert tokenizer.padding_side == "left"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert model.config.vocab_size == len(tokenizer)


@torch.no_grad()
def test_greedy_accuracy_is_partial(tokenizer, model) -> None:
    task = make_task(seed=0)
    problems = task.test[:50]
    encoded = tokenizer([p.prompt for p in problems], return_tensors="pt", padding=True)
    output = model.generate(**encoded, do_sample=False, max_new_tokens=task.max_new_tokens)
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    accuracy = sum(" ".join(t.split()) == p.reference for t, p in zip(texts, problems, strict=True)) / len(problems)
    assert 0.05 < accuracy < 0.9
