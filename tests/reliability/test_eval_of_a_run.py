"""``grpolab eval --model RUN``: the run's own task and sampling settings, not the defaults; a checkpoint folder is
refused with the two ways to evaluate it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.cli import main

# on arith at temperature 0.7: neither is eval's default (reverse, 1.0), so falling back to them would show
ARITH = ["--task", "arith", "--model", "embedded-arith", "--temperature", "0.7", "--steps", "1",
         "--prompts-per-step", "2", "--eval-samples", "0", "--no-eval-start", "--checkpoint-every", "1",
         "--threads", "1", "--no-progress"]
EVAL = ["--n", "0", "--limit", "3", "--threads", "1", "--json"]


@pytest.fixture(scope="module")
def arith_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("arith") / "run"
    assert main(["train", "--out", str(run), *ARITH]) == 0
    return run


def _eval(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[dict, str]:
    assert main(["eval", *argv, *EVAL]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out.strip().splitlines()[-1]), captured.err


@pytest.mark.parametrize("where", ["run", "run/final"])
def test_a_run_is_scored_on_the_task_it_trained_on(arith_run: Path, capsys, where: str) -> None:
    model = arith_run if where == "run" else arith_run / "final"
    result, err = _eval(["--model", str(model)], capsys)
    assert result["task"] == "arith"
    assert "config.yaml: task 'arith', temperature 0.7" in " ".join(err.split())


def test_a_flag_names_the_task_instead(arith_run: Path, capsys) -> None:
    result, err = _eval(["--model", str(arith_run), "--task", "reverse", "--temperature", "1.0"], capsys)
    assert result["task"] == "reverse"
    assert "config.yaml" not in err  # nothing taken from the run


def test_a_checkpoint_folder_names_the_run_and_the_export(arith_run: Path, capsys) -> None:
    code, err = run_cli(["eval", "--model", str(arith_run / "checkpoints" / "step-000001"), *EVAL], capsys)
    assert_one_line_error(code, err, "training checkpoint", f"--model {arith_run} ",
                          f"grpolab export {arith_run} --step 1")


def test_a_task_the_run_imports_by_path_is_refused_unless_trusted(arith_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(arith_run, run)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("task: arith", "task: not_a_module.tasks:build"))
    code, err = run_cli(["eval", "--model", str(run), *EVAL], capsys)
    assert_one_line_error(code, err, "not_a_module.tasks:build", "--trust-run-code")
