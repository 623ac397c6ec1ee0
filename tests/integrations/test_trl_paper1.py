"""experiments/paper1/compare.yaml, paper 1's recipe, runs reduced on the CPU: a tiny random Llama in place of
Qwen3.5-9B, TRL generating without vLLM, GSM8K from the test fixtures, one seed, one step and a tiny
evaluation. Everything else (six estimators, G = 4, LoRA r = 64 / alpha = 128 on the seven projections, bf16,
the schedule and betas, engine trl) is the file's own, so a change that breaks the recipe breaks this test."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("trl")

from grpolab.config import load_config_file

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "experiments" / "paper1" / "compare.yaml"


def _tiny_model(out: Path) -> Path:
    spec = importlib.util.spec_from_file_location("grpolab_trl_example", REPO / "examples" / "trl" / "train_grpo.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    model = example.build_tiny_model(out)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 1024  # GSM8K's prompts run to ~500 characters (one token each here)
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_the_recipe_states_the_paper_settings() -> None:
    settings = load_config_file(RECIPE)
    assert settings["model"] == "Qwen/Qwen3.5-9B" and settings["task"] == "gsm8k"
    assert (settings["lora_r"], settings["lora_alpha"]) == (64, 128)
    assert settings["lora_targets"].split(",") == [f"{m}_proj" for m in ("q", "k", "v", "o", "gate", "up", "down")]
    assert (settings["group_sizes"], settings["steps"], settings["seeds"]) == ("4", 200, 7)
    assert len(settings["estimators"].split(",")) == 6 and {"sign", "dr_grpo"} <= set(settings["estimators"].split(","))
    assert settings["engine"] == "trl" and settings["use_vllm"] is True
    header = RECIPE.read_text().split("\nestimators:")[0]
    assert "simulated" in header and "Unconfirmed" in header and "Guesses" in header


def test_the_recipe_runs_reduced_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture,
                                            in_process_workers: None) -> None:
    """Its six runs train in this process (``in_process_workers``, tests/conftest.py): the recipe is under test,
    not the workers; ``test_trl_engine.py``'s reduced ``grpolab compare --engine trl`` runs TRL in spawned ones."""
    from grpolab.cli import main

    model = _tiny_model(tmp_path / "tiny")
    out = tmp_path / "out"
    argv = ["compare", "--config", str(RECIPE), "--out", str(out), "--model", str(model),
            "--no-use-vllm", "--data", str(REPO / "tests" / "fixtures" / "gsm8k"), "--seeds", "1", "--steps", "1",
            "--prompts-per-step", "1", "--eval-limit", "2", "--eval-samples", "2", "--workers", "2",
            "--task-options", '{"use_chat_template": true, "max_new_tokens": 8}', "--no-report"]
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["estimator"]) == set(load_config_file(RECIPE)["estimators"].split(","))
    assert set(results["phase"]) == {"start", "end"} and set(results["group_size"]) == {4}
    run = next((out / "runs").iterdir())
    saved = load_config_file(run / "config.yaml")
    assert (saved["engine"], saved["lora_r"], saved["dtype"], saved["lr"]) == ("trl", 64, "bfloat16", 1e-6)
    from grpolab.models import load_policy

    assert (run / "final" / "base_model.txt").read_text().strip() == str(model)  # LoRA: the adapter and its base
    assert load_policy(str(run)).model.config.hidden_size == 16  # merged onto the base on loading
