"""Inputs that gave a traceback or a misleading line, each now the right result or one line naming the problem
and the fix (exit 2): odd names in a run's folders, odd text in a task's data, odd task specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.capabilities import checkpoint_folders
from grpolab.config import CompareConfig, TrainConfig
from grpolab.errors import UserError
from grpolab.sweep import compare
from grpolab.sweep.plan import plan_runs
from grpolab.train.checkpoint import checkpoint_dirs
from grpolab.train.identity import run_identity
from grpolab.train.trl_engine.checkpoints import any_checkpoint
from sweep_runs import finish

ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
FILE_FLAGS = ["--task", "file", "--verifier", "exact", "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
              "--eval-limit", "2", "--eval-samples", "0", "--no-eval-start", "--threads", "1", "--no-progress",
              "--max-new-tokens", "4"]
NOT_ASCII_DIGITS = ["step-²", "step-٣", "step-1²", "step-", "step-3\n"]


@pytest.mark.parametrize("name", NOT_ASCII_DIGITS)
def test_a_checkpoint_name_with_digits_that_are_not_ascii_is_left_out(name: str, tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    (root / name).mkdir(parents=True)
    (root / "step-000002").mkdir()
    (root / name.replace("step-", "checkpoint-")).mkdir()
    (root / "checkpoint-7").mkdir()
    assert checkpoint_dirs(root) == [root / "step-000002"]  # before: int("²") raised ValueError
    assert {step: path for step, (_, path) in checkpoint_folders(tmp_path).items()} == {
        2: root / "step-000002", 7: root / "checkpoint-7"}


def test_a_resume_beside_a_superscript_checkpoint_folder_goes_on(finished_run: Path, capsys) -> None:
    (finished_run / "checkpoints" / "step-²").mkdir()
    code, err = run_cli(["train", "--out", str(finished_run), "--resume", "--steps", "3"], capsys)
    assert code == 0, err  # before: ValueError: invalid literal for int() with base 10: '²'
    steps = [json.loads(line)["step"] for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_the_trl_engines_checkpoints_ignore_names_that_are_not_ascii_digits(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "checkpoint-٣").mkdir(parents=True)  # Arabic-Indic 3: a \d, and int() reads it
    assert not any_checkpoint(tmp_path)  # before: taken for TRL's checkpoint 3, so a fresh run was refused


def test_a_lone_surrogate_in_jsonl_data_is_one_line_naming_the_line(tmp_path: Path, capsys) -> None:
    data = tmp_path / "qa.jsonl"
    lines = [json.dumps(row) for row in ROWS]
    lines[4] = '{"prompt": "x\\ud800", "answer": "1"}'  # a lone surrogate: JSON allows the escape, UTF-8 does not
    data.write_text("\n".join(lines) + "\n")
    code, err = run_cli(["train", "--out", str(tmp_path / "run"), "--data", str(data), *FILE_FLAGS], capsys)
    assert_one_line_error(code, err, f"{data}:5", "surrogate", "\\ud800")  # before: UnicodeEncodeError traceback


@pytest.mark.parametrize("spec", ["../x:y", "/abs/x.py:make", "my-tasks:make", "pkg..mod:f", ":f"])
def test_a_task_spec_with_a_path_for_a_module_is_one_line(spec: str, tmp_path: Path, capsys) -> None:
    code, err = run_cli(["train", "--out", str(tmp_path / "run"), "--no-progress", "--task", spec], capsys)
    assert_one_line_error(code, err, repr(spec), "PYTHONPATH")  # before: TypeError (relative import) traceback


@pytest.mark.parametrize("spec", ["../x:y", "my-checks:check"])
def test_a_verifier_spec_with_a_path_for_a_module_is_one_line(spec: str, tmp_path: Path, capsys) -> None:
    code, err = run_cli(["train", "--out", str(tmp_path / "run"), "--no-progress", "--verifier", spec], capsys)
    assert_one_line_error(code, err, repr(spec), "PYTHONPATH")


def _data_folder(folder: Path) -> Path:
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS[:80]))
    (folder / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS[80:]))
    return folder


@pytest.mark.parametrize("task", ["file", "gsm8k", "math500"])
def test_the_data_identity_covers_only_the_files_the_task_reads(task: str, tmp_path: Path) -> None:
    folder = _data_folder(tmp_path / "d")
    config = TrainConfig(task=task, data=str(folder))
    first = run_identity(config)["data"]
    (folder / "README.md").write_text("notes on this data")
    (folder / "notes").mkdir()
    (folder / "notes" / "todo.txt").write_text("more")
    assert run_identity(config)["data"] == first  # before: changed, so a resume was refused as "data changed"
    (folder / "test.jsonl").write_text(json.dumps(ROWS[0]) + "\n")
    assert run_identity(config)["data"] != first


def test_a_resume_goes_on_after_a_readme_was_added_to_the_data_folder(tmp_path: Path, capsys) -> None:
    folder = _data_folder(tmp_path / "d")
    run = tmp_path / "run"
    flags = ["--out", str(run), "--data", str(folder), *FILE_FLAGS, "--checkpoint-every", "1"]
    code, err = run_cli(["train", *flags], capsys)
    assert code == 0, err
    (folder / "README.md").write_text("where this data came from")
    code, err = run_cli(["train", "--out", str(run), "--resume", "--steps", "2", "--no-progress"], capsys)
    assert code == 0, err  # before: "the data ... changed since RUN wrote its checkpoint step-000001"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2


DAMAGED_VALUES = {  # a log row's value -> what the one line says of it
    '"abc"': "its 'loss/total' is a str, not a number",
    "[" * 100_000 + "]" * 100_000: "nested too deeply",
    "9" * 5_000: "an integer of more than 4300 digits",
    '{"a": 1}': "its 'loss/total' is a dict, not a number",
}


def _damage_first_metrics_row(path: Path, value: str) -> None:
    lines = path.read_text().splitlines()
    row = json.loads(lines[0])
    lines[0] = json.dumps({"step": row["step"], "loss/total": 0.0})[:-1].replace("0.0", value) + "}"
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("value", DAMAGED_VALUES)
def test_a_resume_names_a_wrong_typed_deep_or_huge_log_value_in_one_line(value: str, finished_run: Path,
                                                                         capsys) -> None:
    metrics = finished_run / "metrics.jsonl"
    _damage_first_metrics_row(metrics, value)
    code, err = run_cli(["train", "--out", str(finished_run), "--resume", "--steps", "3", "--no-progress"], capsys)
    assert_one_line_error(code, err, f"{metrics} is damaged at line 1", DAMAGED_VALUES[value], "move it aside")


@pytest.mark.parametrize("value", DAMAGED_VALUES)
def test_compare_names_a_wrong_typed_deep_or_huge_log_value_in_one_line(value: str, tmp_path: Path) -> None:
    base = TrainConfig(steps=2)
    out = tmp_path / "out"
    specs = plan_runs(base, ["sign"], [0], [2], out)
    finish(specs[0], 0.5)
    _damage_first_metrics_row(specs[0].run_dir / "metrics.jsonl", value)
    sweep = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4", workers=1)
    with pytest.raises(UserError) as caught:  # before: ArrowTypeError, RecursionError, ValueError tracebacks
        compare(sweep, base, out, report=False)
    assert "\n" not in str(caught.value)
    assert f"{specs[0].run_dir / 'metrics.jsonl'} is damaged at line 1" in str(caught.value)
    assert DAMAGED_VALUES[value] in str(caught.value)


@pytest.mark.parametrize("where", ["middle", "first line"])
def test_one_bad_byte_in_compare_yaml_is_named_as_damage_not_as_a_users_file(where: str, tmp_path: Path) -> None:
    base = TrainConfig(steps=2)
    out = tmp_path / "out"
    finish(plan_runs(base, ["sign"], [0], [2], out)[0], 0.5)
    sweep = CompareConfig(estimators="sign", seeds=1, group_sizes="2", lrs="1e-4", workers=1)
    compare(sweep, base, out, report=False)
    saved = out / "compare.yaml"
    text = saved.read_bytes()
    middle = text.index(b"\n", len(text) // 2) + 1 if where == "middle" else 2  # "# grpolab ...": its 3rd byte
    saved.write_bytes(text[:middle] + b"\xff" + text[middle + 1:])
    line = text[:middle].count(b"\n") + 1
    with pytest.raises(UserError) as caught:  # before: "holds files grpolab compare did not write (compare.yaml, ..."
        compare(sweep, base, out, report=False)
    assert f"{saved} is damaged: not UTF-8 text" in str(caught.value)
    assert f"line {line}" in str(caught.value) and "restore it from a copy" in str(caught.value)
    assert "did not write" not in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("device", ["cpu\n", "cpu\x1b[2J", "cuda:0\n"])
def test_a_device_with_a_control_character_is_refused_with_it_escaped(device: str, tmp_path: Path, capsys) -> None:
    code, err = run_cli(["train", "--out", str(tmp_path / "run"), "--no-progress", "--device", device], capsys)
    line = assert_one_line_error(code, err, "device must be auto, cpu, cuda or cuda:N", repr(device))
    assert "\x1b" not in line  # before: "--device cpu<newline>: torch sees no CUDA GPU ...; use --device cpu"


@pytest.mark.parametrize("command", [["train", "--steps", "1"], ["compare", "--estimators", "sign"]])
def test_out_naming_a_file_says_it_is_a_file(command: list[str], tmp_path: Path, capsys) -> None:
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    code, err = run_cli([*command, "--out", str(taken), "--no-progress"], capsys)
    assert_one_line_error(code, err, f"{taken} is a file, not a folder", "choose a folder for --out")
    assert taken.read_text() == "mine"  # before: "File exists (...); check that the path is writable ..."


def test_a_huge_value_is_echoed_cut_to_its_start_and_length(tmp_path: Path, capsys) -> None:
    config = tmp_path / "big.yaml"
    config.write_text("task: " + "t" * 5_000_000 + "\n")
    code, err = run_cli(["train", "--config", str(config), "--out", str(tmp_path / "run"), "--no-progress"], capsys)
    line = assert_one_line_error(code, err, "unknown task 'tttt", "[4,999,940 more characters]", "choose one of")
    assert len(line) < 500  # before: the 5,000,000-character name echoed whole


FAILING = [["train", "--task", "../x:y"], ["compare", "--estimators", "sign", "--task", "gsm8k", "--data", "no.jsonl"]]


@pytest.mark.parametrize("made", ["new/nested/run", "empty"])
@pytest.mark.parametrize("command", FAILING)
def test_a_command_that_fails_before_training_leaves_no_folder(command: list[str], made: str, tmp_path: Path,
                                                                capsys) -> None:
    (tmp_path / "empty").mkdir()
    out = tmp_path / made
    code, err = run_cli([*command, "--out", str(out), "--no-progress"], capsys)
    assert code == 2, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # before: OUT holding .grpolab.lock(.owner)
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_failed_command_leaves_an_existing_folders_files_alone(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / ".grpolab.lock").write_text("")  # a lock file of an earlier command: not this one's to remove
    code, err = run_cli(["train", "--task", "../x:y", "--out", str(out), "--no-progress"], capsys)
    assert code == 2, err
    assert sorted(p.name for p in out.iterdir()) == [".grpolab.lock", ".grpolab.lock.owner"]
