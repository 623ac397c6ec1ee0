"""``grpolab.models.load_policy``: every kind of model name, and a clear error for each wrong one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grpolab.errors import UserError
from grpolab.models import EMBEDDED, EMBEDDED_ARITH, embedded_model_dir, load_policy, resolve_model_dir


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


def test_smollm2_resolves_to_its_gguf_file() -> None:
    pytest.importorskip("gguf")
    directory, extra = resolve_model_dir("smollm2-135m")
    assert extra["gguf_file"].endswith(".gguf") and (directory / extra["gguf_file"]).is_file()
