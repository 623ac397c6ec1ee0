"""Tests for the embedded models: ``grpolab/assets/embedded`` (the default, for ``reverse``) and
``grpolab/assets/embedded-arith`` (for ``arith``): offline, tiny, partly competent in the intended way."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpolab.tasks import get_task
from grpolab.tasks.arith import ALPHABET, make_task

pytestmark = pytest.mark.fast

ASSETS = Path(str(resources.files("grpolab") / "assets" / "embedded"))
ARITH_ASSETS = Path(str(resources.files("grpolab") / "assets" / "embedded-arith"))


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(ASSETS, local_files_only=True)


@pytest.fixture(scope="module")
def model():
    loaded = AutoModelForCausalLM.from_pretrained(ASSETS, local_files_only=True)
    return loaded.eval()


@pytest.mark.parametrize("assets", [ASSETS, ARITH_ASSETS], ids=["embedded", "embedded-arith"])
def test_assets_are_small_safetensors_only(assets: Path) -> None:
    names = {path.name for path in assets.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "competence.json"} <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    assert (assets / "model.safetensors").stat().st_size < 5_000_000


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


def _completions(model, tokenizer, prompts: list[str], max_new_tokens: int, samples: int = 1) -> list[str]:
    torch.manual_seed(0)
    encoded = tokenizer([p for p in prompts for _ in range(samples)], return_tensors="pt", padding=True)
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": None} if samples > 1 else {"do_sample": False}
    with torch.no_grad():
        output = model.generate(**encoded, max_new_tokens=max_new_tokens, **sampling)
    return tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)


def test_arith_model_greedy_accuracy_is_partial() -> None:
    tokenizer = AutoTokenizer.from_pretrained(ARITH_ASSETS, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(ARITH_ASSETS, local_files_only=True).eval()
    task = make_task(seed=0)
    problems = task.test[:50]
    texts = _completions(model, tokenizer, [p.prompt for p in problems], task.max_new_tokens)
    accuracy = sum(" ".join(t.split()) == p.reference for t, p in zip(texts, problems, strict=True)) / len(problems)
    assert 0.05 < accuracy < 0.9


def test_reverse_model_knows_both_procedures_and_prefers_by_family(tokenizer, model) -> None:
    """Every completion is the reversal or the copy of the digits (two procedures it can carry out on unseen
    strings); reversal dominates after '+' and is rare after '*': per-family success is bimodal."""
    task = get_task("reverse")
    problems = task.test[:48]
    samples = 8
    texts = _completions(model, tokenizer, [p.prompt for p in problems], task.max_new_tokens, samples)
    rates: dict[str, list[float]] = {"+": [], "*": []}
    procedures = 0
    for index, problem in enumerate(problems):
        digits = problem.prompt[:-2]
        outputs = [t.strip() for t in texts[index * samples : (index + 1) * samples]]
        procedures += sum(o in (digits, digits[::-1]) for o in outputs)
        rates[problem.prompt[-2]].append(sum(o == digits[::-1] for o in outputs) / samples)
    assert procedures / (len(problems) * samples) > 0.9
    assert sum(rates["+"]) / len(rates["+"]) > 0.7
    assert sum(rates["*"]) / len(rates["*"]) < 0.3
