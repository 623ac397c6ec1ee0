"""The TRL mapping checked by behaviour (``grpolab.train.trl_engine.arguments.MAPPED``): each mapped setting, moved
off its default, changes TRL's ``GRPOConfig`` (and peft ``LoraConfig``) arguments, and only ones the table names.
Removing a setting's conversion, or an argument from its row, fails here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

pytest.importorskip("trl")

from grpolab.config import TrainConfig
from grpolab.config.fields import choices, lower_bounds
from grpolab.errors import UserError
from grpolab.train.trl_engine.arguments import MAPPED, grpo_arguments, lora_config

BASE = {"engine": "trl", "steps": 4, "prompts_per_step": 2, "group_size": 2, "max_new_tokens": 8}

# The settings a mapped field only acts under (the rest of the base): inputs, not expectations.
CONTEXT: dict[str, dict[str, Any]] = {
    "cispo_ratio_max": {"policy_loss": "cispo", "loss_aggregation": "token_mean"},
    "lora_r": {"lora": True}, "lora_alpha": {"lora": True}, "lora_targets": {"lora": True},
    "sampler_is_cap": {"use_vllm": True}, "vllm_mode": {"use_vllm": True},
"micro_batch_size": {"micro_batch_size": 4},
}
# A value to try for a field whose default is None or has no natural neighbour: inputs, not expectations.
OTHER: dict[str, Any] = {
    "max_new_tokens": 16, "dual_clip_c": 3.0, "sampler_is_cap": 2.0, "cispo_ratio_max": 4.0, "cispo_ratio_min": 0.5,
    "epsilon_high": 0.28, "adam_betas": (0.8, 0.95), "lora_targets": "q_proj,v_proj", "micro_batch_size": 2,
    "device": "cpu", "seed": 3, "top_p": 0.5, "checkpoint_every": 3,
    "top_entropy_quantile": 0.2, "entropy_target": 0.3, "off_policy_mask_threshold": 0.5,
}


def _other_value(name: str, default: Any) -> list[Any]:
    """Values other than ``default`` to try for ``name``: the schema's other choices, the flipped bool, or a
    neighbour within the field's bound."""
    if name in OTHER:
        return [OTHER[name]]
    allowed = choices(TrainConfig).get(name)
    if allowed:
        return [value for value in allowed if value != default]
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int):
        return [default + 1]
    if isinstance(default, float):
        bound = lower_bounds(TrainConfig).get(name)
        return [default * 2 if default else 0.5] if bound is None or default * 2 >= bound else [default + 0.5]
    raise AssertionError(f"no value to try for {name}: add one to OTHER")


def _effective(config: TrainConfig, tmp_path: Any) -> dict[str, Any]:
    """Every argument TRL trains with under ``config`` (one process): ``GRPOConfig``'s fields and the LoRA's."""
    from trl import GRPOConfig

    kwargs = grpo_arguments(config, output_dir=str(tmp_path), num_processes=1, max_new_tokens=config.max_new_tokens)
    args = GRPOConfig(**kwargs)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.name != "output_dir"}
    peft = lora_config(config, _Model())
    values["peft_config"] = peft is not None
    for key in ("r", "lora_alpha", "target_modules"):
        value = getattr(peft, key, None)
        values[f"peft_config.{key}"] = sorted(value) if isinstance(value, set | list) else value
    return {key: str(value) for key, value in values.items()}


class _Model:
    """Stands in for a model for ``lora_config``: the module names it has."""

    def named_modules(self) -> list[tuple[str, None]]:
        names = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj".split(",")
        return [(f"layers.0.{n}", None) for n in names]


DEFAULTS = TrainConfig().to_dict()
CHANGEABLE = sorted(name for name, entry in MAPPED.items() if entry.targets and name != "device")


@pytest.mark.parametrize("name", CHANGEABLE)
def test_each_mapped_setting_changes_the_trl_arguments_the_table_names(name: str, tmp_path: Any) -> None:
    base = TrainConfig(**{**BASE, **CONTEXT.get(name, {})})
    before = _effective(base, tmp_path)
    tried = 0
    for value in _other_value(name, getattr(base, name)):
        try:
            changed = dataclasses.replace(base, **{name: value})
            after = _effective(changed, tmp_path)
        except UserError as error:  # a choice engine trl refuses: tested in test_trl_choices.py
            assert "engine trl" in str(error)
            continue
        tried += 1
        moved = {key for key in before if before[key] != after[key]}
        assert moved, f"{name}={value!r} left TRL's arguments as they were"
        assert moved <= set(MAPPED[name].targets), f"{name}={value!r} moved {sorted(moved)}"
    assert tried, f"every other value of {name} was refused"


def test_the_device_reaches_trl_as_use_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``device`` resolves on the machine (auto is the CPU here), so it is moved by hand: a CUDA device lets
    accelerate place TRL, the CPU sets ``use_cpu``; nothing else changes."""
    import torch

    from grpolab import devices

    on_cpu = grpo_arguments(TrainConfig(**BASE, device="cpu"), output_dir="x", num_processes=1, max_new_tokens=8)
    monkeypatch.setattr(devices, "resolve", lambda name: torch.device("cuda", 0))
    on_gpu = grpo_arguments(TrainConfig(**BASE, device="cpu"), output_dir="x", num_processes=1, max_new_tokens=8)
    assert {key for key in on_cpu if on_cpu[key] != on_gpu[key]} == set(MAPPED["device"].targets) == {"use_cpu"}
    assert on_cpu["use_cpu"] is True and on_gpu["use_cpu"] is False


def test_a_setting_mapped_to_nothing_is_refused_off_its_default() -> None:
    """A mapped setting with no TRL argument of its own (``cispo_ratio_min``) may only keep its default."""
    for name in sorted(name for name, entry in MAPPED.items() if not entry.targets):
        with pytest.raises(UserError, match="engine trl"):
            grpo_arguments(TrainConfig(**{**BASE, "policy_loss": "cispo", "loss_aggregation": "token_mean",
                                          name: OTHER[name]}), output_dir="x", num_processes=1, max_new_tokens=8)


def test_the_docs_hold_the_tables_rendering() -> None:
    from pathlib import Path

    from grpolab.train.trl_engine.arguments import render_markdown

    docs = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    start, end = "<!-- trl-mapping: start -->\n", "<!-- trl-mapping: end -->"
    assert start in docs and end in docs, "docs/integrations.md lost the TRL mapping's markers"
    held = docs.split(start, 1)[1].split(end, 1)[0]
    assert held == render_markdown(), "docs/integrations.md's TRL table is stale: paste render_markdown()'s output"


@pytest.mark.parametrize(("lora", "dtype", "gpu", "bf16_weights"), [
    (True, "bfloat16", True, True), (False, "bfloat16", True, False), (True, "float32", True, False),
    (True, "bfloat16", False, False)])
def test_the_trl_engine_loads_bfloat16_weights_for_lora_under_bf16_on_a_gpu(
        lora: bool, dtype: str, gpu: bool, bf16_weights: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """As TRL users load a LoRA run's base model; a full fine-tune keeps float32 master weights, the CPU float32."""
    import torch

    from grpolab.config import TrainConfig
    from grpolab.train.trl_engine.run import loads_bfloat16_weights

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(gpu))
    config = TrainConfig(engine="trl", lora=lora, dtype=dtype, device="cuda" if gpu else "cpu")
    assert loads_bfloat16_weights(config) is bf16_weights
