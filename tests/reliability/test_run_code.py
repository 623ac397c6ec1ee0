"""A run directory is data: a task or verifier that its saved config.yaml names by dotted path is imported
only when the user gives it again or passes --trust-run-code, and a run_id read from results.parquet never
leads out of the output folder. Tried as a user meets it: a crafted run directory whose config.yaml holds
``task: os:system`` with a shell command in ``task_options``, resumed or analysed by ``grpolab mechanism``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.config import TrainConfig, save_config, yaml_text
from grpolab.config.files import SAVED_FOOTER, SAVED_HEADER
from grpolab.errors import UserError
from grpolab.sweep.settings import settings_to_rerun
from grpolab.train.settings import refuse_run_code


def _crafted_config(run_dir: Path, marker: Path, setting: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    command = f"touch {marker}"
    values = ({"task": "os:system", "task_options": {"command": command}} if setting == "task" else
              {"verifier": "os:system"} if setting == "verifier" else
              {"task": "table", "task_options": {"verifier": "os:system", "path": command}})
    save_config(TrainConfig(**values), run_dir / "config.yaml")


@pytest.mark.parametrize("setting", ["task", "verifier", "task_options.verifier"])
def test_resume_of_a_crafted_run_directory_runs_nothing_and_names_the_code(tmp_path, capsys, setting):
    run, marker = tmp_path / "run", tmp_path / "pwned"
    _crafted_config(run, marker, setting)
    code, err = run_cli(["train", "--out", str(run), "--resume", "--no-progress"], capsys)
    assert_one_line_error(code, err, f"names the {setting} 'os:system'", "--trust-run-code",
                          str(run / "config.yaml"))
    assert not marker.exists()


def _crafted_comparison(out: Path, run_id: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"run_id": [run_id], "estimator": ["grpo"], "group_size": [4], "seed": [0],
                  "lr": [1e-4]}).to_parquet(out / "results.parquet")


def test_mechanism_on_a_crafted_comparison_runs_nothing_and_names_the_code(tmp_path, capsys):
    out, marker = tmp_path / "out", tmp_path / "pwned"
    _crafted_comparison(out, "r1")
    _crafted_config(out / "runs" / "r1", marker, "task")
    code, err = run_cli(["mechanism", str(out), "--prompts", "1", "--samples", "1"], capsys)
    assert_one_line_error(code, err, "names the task 'os:system'", "--trust-run-code",
                          str(out / "runs" / "r1" / "config.yaml"))
    assert not marker.exists()


@pytest.mark.parametrize("run_id", ["../../outside", "/etc", "link"])
def test_a_run_id_leading_out_of_the_output_folder_is_refused(tmp_path, capsys, run_id):
    out = tmp_path / "out"
    _crafted_comparison(out, run_id)
    (out / "runs").mkdir()
    (out / "runs" / "link").symlink_to(tmp_path)
    save_config(TrainConfig(), tmp_path / "config.yaml")  # what the escaping path would have read
    code, err = run_cli(["mechanism", str(out)], capsys)
    assert_one_line_error(code, err, repr(run_id), "results.parquet")


def test_code_given_again_or_trusted_passes_the_gate(tmp_path):
    config = TrainConfig(task="my_tasks:build", verifier="my_verifiers.check")
    source = tmp_path / "config.yaml"
    with pytest.raises(UserError, match="task 'my_tasks:build'"):
        refuse_run_code(config, source, given={}, trust=False)
    with pytest.raises(UserError, match=r"verifier 'my_verifiers\.check'"):
        refuse_run_code(config, source, given={"task": "my_tasks:build"}, trust=False)
    refuse_run_code(config, source, given={"task": "my_tasks:build", "verifier": "my_verifiers.check"}, trust=False)
    refuse_run_code(config, source, given={}, trust=True)
    refuse_run_code(TrainConfig(task="reverse", verifier="exact"), source, given={}, trust=False)


def _crafted_compare_yaml(out: Path, marker: Path) -> Path:
    """A comparison folder's saved compare.yaml (grpolab's first and last lines) naming ``task: os:system``."""
    out.mkdir(parents=True, exist_ok=True)
    values = {"estimators": "sign", "seeds": 1, "task": "os:system", "task_options": {"command": f"touch {marker}"}}
    path = out / "compare.yaml"
    path.write_text(f"{SAVED_HEADER}\n{yaml_text(values)}{SAVED_FOOTER}: {len(values)} settings\n", encoding="utf-8")
    return path


def test_rerunning_a_crafted_compare_yaml_runs_nothing_and_names_the_code(tmp_path, capsys):
    marker = tmp_path / "pwned"
    saved = _crafted_compare_yaml(tmp_path / "old", marker)
    code, err = run_cli(["compare", "--config", str(saved), "--out", str(tmp_path / "new"), "--workers", "1"], capsys)
    assert_one_line_error(code, err, "names the task 'os:system'", "--trust-run-code", str(saved))
    assert not marker.exists()
    assert not (tmp_path / "new").exists()


def test_a_hand_written_config_or_trusted_saved_one_passes_the_gate(tmp_path):
    values = {"task": "os:system", "task_options": {"command": "true"}}
    assert settings_to_rerun(values, saved=False) == values  # the user's own file: their code
    assert settings_to_rerun(values, saved=True, trust=True) == values
    assert settings_to_rerun(values, saved=True, given={"task": "os:system"}) == values
    with pytest.raises(UserError, match="names the task 'os:system'"):
        settings_to_rerun(values, saved=True, given={"task": "reverse"})
