"""The model card: Hub front matter, the run's settings and its start and end evaluations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from grpolab import __version__
from grpolab.export import export
from grpolab.export.card import hub_base_model, model_card
from grpolab.export.source import read_run


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def _row(card: str, name: str) -> str:
    line = next(line for line in card.splitlines() if line.startswith(f"| {name} |"))
    return line.strip("|").split(" | ")[1].strip()


def test_the_card_names_the_run(lora_run: Path, tmp_path: Path) -> None:
    export(lora_run, tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text()
    meta = _front_matter(card)
    assert meta == {"library_name": "transformers", "tags": ["grpolab", "rlvr", "grpo"]}  # embedded: no Hub id
    assert f"the run `{lora_run}`, its final model, after step 2" in card
    config = yaml.safe_load((lora_run / "config.yaml").read_text())
    assert _row(card, "estimator") == f"`{config['advantage']}`"
    assert _row(card, "group size G") == str(config["group_size"])
    assert _row(card, "seed") == str(config["seed"]) and _row(card, "learning rate") == f"{config['lr']:g}"
    assert _row(card, "steps") == f"2 of {config['steps']}" and _row(card, "task") == f"`{config['task']}`"
    assert "r = 4, alpha = 8, merged" in _row(card, "LoRA") and "`embedded`" in _row(card, "base model")
    summary = json.loads((lora_run / "summary.json").read_text())
    recorded = summary["grpolab"]
    assert recorded["version"] == __version__ and _row(card, "grpolab").startswith(__version__)
    assert "(trained the run)" in _row(card, "grpolab")
    if recorded["commit"]:  # run from a git checkout: the commit that trained the run is named
        assert recorded["commit"][:12] in _row(card, "grpolab")
    assert "has no chat template" in card


def test_the_card_holds_the_start_and_end_evaluations(full_run: Path, tmp_path: Path) -> None:
    export(full_run, tmp_path / "out")
    card = (tmp_path / "out" / "README.md").read_text()
    rows = [json.loads(line) for line in (full_run / "eval.jsonl").read_text().splitlines()]
    for row in rows:
        line = next(x for x in card.splitlines() if x.startswith(f"| {row['phase']} | {row['step']} |"))
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[3] == str(len(row["problem_ids"]))
        assert float(cells[4]) == pytest.approx(row["greedy_accuracy"], abs=5e-5)
        assert float(cells[5]) == pytest.approx(row["pass_at_k"]["1"], abs=5e-5)
    assert [row["phase"] for row in rows] == ["start", "end"]
    assert f"grpolab eval --model {tmp_path / 'out'} --task reverse --limit 8 --n 2 --seed 0" in card


def test_a_hub_base_model_goes_into_the_front_matter(full_run: Path) -> None:
    source = read_run(full_run)
    hub = type(source)(source.run_dir, source.config.replace(model="Qwen/Qwen2.5-0.5B-Instruct"), source.summary,
                       source.step)
    meta = _front_matter(model_card(hub, [], "out", chat_template=True))
    assert meta["base_model"] == "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize(("model", "hub"), [
    ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("embedded", None), ("embedded-arith", None), ("/models/mine", None), ("./mine/model", None), ("a/b/c", None),
])
def test_hub_base_model(model: str, hub: str | None) -> None:
    assert hub_base_model(model) == hub


def test_a_run_that_predates_the_record_says_so(lora_run: Path, tmp_path: Path) -> None:
    summary_path = lora_run / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary.pop("grpolab")
    run = tmp_path / "old-run"
    import shutil

    shutil.copytree(lora_run, run)
    (run / "summary.json").write_text(json.dumps(summary))
    export(run, tmp_path / "out")
    assert _row((tmp_path / "out" / "README.md").read_text(), "grpolab") == (
        f"not recorded by the run; exported with grpolab {__version__}")
