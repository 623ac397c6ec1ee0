"""scripts/gpu_check_shapes.py's byte-level stand-in tokenizer: exactly the real vocabulary size with the chat
specials at the real model's ids, for both shapes (SmolLM2's specials are ids 0-2, inside the range the 256 byte
symbols took before: its pad id landed past the vocabulary, and building the model failed with "Padding_idx must be
within num_embeddings" on a GPU machine without .gpu/smollm2-tokenizer)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check_shapes  # noqa: E402


@pytest.mark.parametrize("name", sorted(gpu_check_shapes.SHAPES))
def test_stand_in_tokenizer_has_the_real_vocabulary_and_special_ids(name):
    shape = gpu_check_shapes.SHAPES[name]
    tokenizer = gpu_check_shapes.byte_level_tokenizer(shape["vocab_size"], shape["specials"])
    assert len(tokenizer) == shape["vocab_size"]
    for token, token_id in shape["specials"].items():
        assert tokenizer.convert_tokens_to_ids(token) == token_id
    assert tokenizer.pad_token_id == shape["specials"]["<|endoftext|>"]
    assert tokenizer.eos_token_id == shape["specials"]["<|im_end|>"]
    text = "Tom has 12 apples; 3 more + ü?"
    ids = tokenizer(text).input_ids
    assert len(ids) == len(text.encode())  # one token a byte: no merges
    assert max(ids) < shape["vocab_size"]
    assert tokenizer.decode(ids) == text


def test_stand_in_tokenizer_builds_a_model_of_the_smollm2_shape():
    shape = gpu_check_shapes.SHAPES["smollm2-135m-shape"]
    tokenizer = gpu_check_shapes.byte_level_tokenizer(shape["vocab_size"], shape["specials"])
    model = gpu_check_shapes.random_model(shape, tokenizer, cpu=True)
    assert model.config.pad_token_id == 0
    assert model.get_input_embeddings().num_embeddings == shape["vocab_size"]
