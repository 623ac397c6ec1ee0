"""``grpolab lm-eval-tasks`` (``grpolab.integrations.lm_eval.tasks``): the YAML and data it writes, read back by
lm-eval's own task loader, for the embedded task and for GSM8K and MATH-500 from the test fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from grpolab.cli import main
from grpolab.errors import UserError
from grpolab.harness_samples import verifier_for
from grpolab.integrations.lm_eval import GenerationSettings, lm_eval_task_name, write_task
from grpolab.tasks import get_task

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DATA = {"gsm8k": FIXTURES / "gsm8k", "math500": FIXTURES / "math500" / "test.jsonl"}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_yaml_asks_for_repeats_with_the_tasks_generation_settings(tmp_path: Path) -> None:
    task = get_task("reverse")
    written = write_task(task, tmp_path, GenerationSettings(repeats=5, temperature=0.7, max_new_tokens=9), limit=6)
    config = yaml.safe_load(written.yaml_path.read_text())
    assert config["task"] == written.name == "grpolab_reverse"
    assert config["output_type"] == "generate_until" and config["repeats"] == 5
    assert config["generation_kwargs"] == {"until": [], "do_sample": True, "temperature": 0.7, "max_gen_toks": 9}
    assert config["dataset_path"] == "json"
    assert Path(config["dataset_kwargs"]["data_files"]["test"]) == written.data_path.resolve()
    rows = _rows(written.data_path)
    assert [(r["id"], r["prompt"], r["reference"]) for r in rows] == [(p.id, p.prompt, p.reference)
                                                                      for p in task.test[:6]]
    assert written.documents == 6 and config["metadata"]["verifier"] == "exact"


def test_temperature_zero_is_greedy(tmp_path: Path) -> None:
    written = write_task(get_task("reverse"), tmp_path, GenerationSettings(1, 0.0, 4))
    assert yaml.safe_load(written.yaml_path.read_text())["generation_kwargs"]["do_sample"] is False


def test_the_command_takes_temperature_zero_as_greedy(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The docs' greedy recipe, as a user types it (was: refused, "need ... temperature > 0"); below 0 is refused."""
    assert main(["lm-eval-tasks", "--out", str(tmp_path), "--task", "reverse", "--n", "1", "--temperature", "0"]) == 0
    kwargs = yaml.safe_load((tmp_path / "grpolab_reverse.yaml").read_text())["generation_kwargs"]
    assert kwargs["do_sample"] is False and kwargs["temperature"] == 0
    assert main(["lm-eval-tasks", "--out", str(tmp_path), "--task", "reverse", "--temperature", "-1"]) == 2
    assert "temperature must be > 0" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["reverse", "arith", "gsm8k", "math500"])
def test_every_built_in_task_is_rescored_with_its_own_verifier(name: str) -> None:
    task = get_task(name, path=DATA[name]) if name in DATA else get_task(name)
    assert verifier_for(lm_eval_task_name(name)) == task.verifier


def test_lm_eval_reads_the_prompts_and_references_as_grpolab_wrote_them(tmp_path: Path, monkeypatch) -> None:
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    task = get_task("gsm8k", path=DATA["gsm8k"])
    write_task(task, tmp_path / "tasks", GenerationSettings(3, 1.0, 32), limit=4)
    lm_task = TaskManager(include_path=str(tmp_path / "tasks")).load(["grpolab_gsm8k"])["tasks"]["grpolab_gsm8k"]
    docs = list(lm_task.test_docs())
    assert [lm_task.doc_to_text(d) for d in docs] == [p.prompt for p in task.test[:4]]
    assert [lm_task.doc_to_target(d) for d in docs] == [p.reference for p in task.test[:4]]
    assert lm_task.config.repeats == 3


def test_the_command_writes_gsm8k_from_a_local_folder(tmp_path: Path, capsys) -> None:
    assert main(["lm-eval-tasks", "--out", str(tmp_path), "--task", "gsm8k", "--data", str(DATA["gsm8k"]),
                 "--n", "8", "--limit", "3", "--max-new-tokens", "64"]) == 0
    config = yaml.safe_load((tmp_path / "grpolab_gsm8k.yaml").read_text())
    assert config["repeats"] == 8 and config["generation_kwargs"]["max_gen_toks"] == 64
    assert len(_rows(tmp_path / "grpolab_gsm8k.jsonl")) == 3
    out = capsys.readouterr().out
    assert "--tasks grpolab_gsm8k" in out and "grpolab eval --from-samples" in out


def test_the_command_defaults_to_the_tasks_token_budget_and_every_test_problem(tmp_path: Path) -> None:
    task = get_task("math500", path=DATA["math500"], seed=0)
    assert main(["lm-eval-tasks", "--out", str(tmp_path), "--task", "math500", "--data", str(DATA["math500"])]) == 0
    config = yaml.safe_load((tmp_path / "grpolab_math500.yaml").read_text())
    assert config["generation_kwargs"]["max_gen_toks"] == task.max_new_tokens
    assert len(_rows(tmp_path / "grpolab_math500.jsonl")) == len(task.test) and config["repeats"] == 16


def test_an_out_that_is_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(UserError, match="is a file"):
        write_task(get_task("reverse"), target, GenerationSettings(1, 1.0, 4))


def test_a_task_given_by_import_path_gets_a_name_lm_eval_takes() -> None:
    assert lm_eval_task_name("my_pkg.tasks:build") == "grpolab_my_pkg_tasks_build"


def test_the_rescoring_line_names_the_verifier_where_the_task_name_does_not_give_it(tmp_path: Path, capsys) -> None:
    table = ["--task", "file", "--data", str(DATA["gsm8k"] / "test.jsonl"), "--prompt-column", "question",
             "--reference-column", "answer", "--verifier", "gsm8k"]
    assert main(["lm-eval-tasks", "--out", str(tmp_path), *table]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("--from-samples OUT --verifier gsm8k")
    assert main(["lm-eval-tasks", "--out", str(tmp_path), "--task", "reverse", "--verifier", "exact"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("--from-samples OUT")


def test_writing_a_task_warns_about_no_model(tmp_path: Path, recwarn) -> None:
    assert main(["lm-eval-tasks", "--out", str(tmp_path), "--task", "arith", "--limit", "2"]) == 0
    assert not [w for w in recwarn if "embedded" in str(w.message)]  # `grpolab eval --task arith` warns here
