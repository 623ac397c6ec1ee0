"""End to end: a run exported, loaded back by transformers, and evaluated by ``grpolab eval`` as the run is."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpolab.checksums import seal_folder
from grpolab.cli import main
from grpolab.errors import UserError
from grpolab.export import export
from grpolab.models import load_policy
from grpolab.train.trl_engine.checkpoints import seal


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(str(folder)).state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return sorted(a) == sorted(b) and all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("run", ["lora_run", "full_run"])
def test_the_export_holds_the_weights_grpolab_evaluates(run: str, request: pytest.FixtureRequest,
                                                        tmp_path: Path) -> None:
    run_dir = request.getfixturevalue(run)
    written = export(run_dir, tmp_path / "out")
    assert [(w.run_dir, w.step, w.folder) for w in written] == [(run_dir, 2, tmp_path / "out")]
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md"} <= files
    umask = os.umask(0)
    os.umask(umask)  # the folder is for sharing: the umask's modes, not mkdtemp's 0700 and safetensors' 0600
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o777 & ~umask
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()} == {0o666 & ~umask}
    assert not {"adapter_config.json", "adapter_model.safetensors", "base_model.txt"} & files
    exported = _weights(tmp_path / "out")
    assert not any("lora" in name for name in exported)
    assert _same(exported, load_policy(str(run_dir)).model.state_dict())  # what `grpolab eval --model RUN` loads
    base = load_policy("embedded").model.state_dict()
    assert not _same(exported, base)  # the trained (and, for LoRA, merged) weights, not the base model's


def test_the_tokenizer_loads_with_auto_tokenizer_and_encodes_as_grpolab_does(full_run: Path, tmp_path: Path) -> None:
    export(full_run, tmp_path / "out")
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    ours = load_policy("embedded").tokenizer
    for text in ("4821*=", "123+=1284", "<eos>"):
        assert loaded(text).input_ids == ours(text).input_ids
    assert (loaded.eos_token_id, loaded.pad_token_id) == (ours.eos_token_id, ours.pad_token_id)
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert generation["eos_token_id"] == ours.eos_token_id
    # the base pins max_new_tokens 8, which would override a harness's max_gen_toks (transformers lets it win)
    assert json.loads((full_run / "final" / "generation_config.json").read_text()).get("max_new_tokens") == 8
    assert "max_new_tokens" not in generation and "max_length" not in generation


@pytest.mark.parametrize("run", ["lora_run", "full_run"])
def test_grpolab_eval_of_the_export_gives_the_runs_greedy_accuracy(run: str, request: pytest.FixtureRequest,
                                                                   tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = request.getfixturevalue(run)
    assert main(["export", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    results = []
    for model in (run_dir, tmp_path / "out"):
        capsys.readouterr()
        assert main(["eval", "--model", str(model), "--limit", "16", "--n", "2", "--json"]) == 0
        results.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert results[0]["greedy_accuracy"] == results[1]["greedy_accuracy"]
    assert results[0]["pass_at_k"] == results[1]["pass_at_k"]


@pytest.mark.parametrize("run", ["lora_run", "full_run"])
def test_a_checkpoint_exports_the_weights_of_its_step(run: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    run_dir = request.getfixturevalue(run)
    export(run_dir, tmp_path / "final")
    export(run_dir, tmp_path / "step2", step=2)
    export(run_dir, tmp_path / "step1", step=1)
    assert _same(_weights(tmp_path / "step2"), _weights(tmp_path / "final"))  # the last checkpoint is the final model
    assert not _same(_weights(tmp_path / "step1"), _weights(tmp_path / "step2"))
    assert "its checkpoint of step 1" in (tmp_path / "step1" / "README.md").read_text()


def _trl_checkpoint(run_dir: Path, step: int) -> Path:
    """``checkpoints/checkpoint-N`` as TRL writes it (a peft adapter for a LoRA run, else the whole model; the
    tokenizer; its state), sealed, holding the run's final weights."""
    checkpoint = run_dir / "checkpoints" / f"checkpoint-{step}"
    if (run_dir / "final" / "adapter_config.json").is_file():
        base = load_policy("embedded")
        PeftModel.from_pretrained(base.model, str(run_dir / "final")).save_pretrained(str(checkpoint))
        base.tokenizer.save_pretrained(str(checkpoint))
    else:
        shutil.copytree(run_dir / "final", checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    seal(checkpoint)
    return checkpoint


@pytest.mark.parametrize(("run", "weights"), [("lora_run", "adapter_model.safetensors"),
                                              ("full_run", "model.safetensors")])
def test_a_trl_engine_checkpoint_exports(run: str, weights: str, request: pytest.FixtureRequest,
                                         tmp_path: Path) -> None:
    original = request.getfixturevalue(run)
    run_dir = Path(shutil.copytree(original, tmp_path / "run"))
    checkpoint = _trl_checkpoint(run_dir, 5)
    export(run_dir, tmp_path / "out", step=5)
    assert _same(_weights(tmp_path / "out"), load_policy(str(original)).model.state_dict())
    (checkpoint / weights).write_bytes(b"not the weights")
    with pytest.raises(UserError, match=f"run {run_dir} is damaged: its checkpoint checkpoint-5 cannot be read"):
        export(run_dir, tmp_path / "again", step=5)
    assert not (tmp_path / "again").exists()


def test_the_tokenizers_chat_template_travels(full_run: Path, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(full_run, tmp_path / "run"))
    template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    (run_dir / "final" / "chat_template.jinja").write_text(template)
    export(run_dir, tmp_path / "out")
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    assert loaded.chat_template == template
    assert loaded.apply_chat_template([{"role": "user", "content": "123+"}], tokenize=False) == "123+="
    assert "chat template is in `chat_template.jinja`" in (tmp_path / "out" / "README.md").read_text()


def test_the_generation_config_gets_the_tokenizers_ids_it_lacks(full_run: Path, tmp_path: Path) -> None:
    run_dir = Path(shutil.copytree(full_run, tmp_path / "run"))
    path = run_dir / "final" / "generation_config.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "pad_token_id"}))
    seal_folder(path.parent)  # a final model saved so by an older transformers
    export(run_dir, tmp_path / "out")
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert generation["pad_token_id"] == load_policy("embedded").tokenizer.pad_token_id == 0
