"""Bad input through the command line: each mistake gives exit code 2 and one line naming the problem and
the fix (never a traceback), and bad rewards never put a NaN or inf into the loss.

Most cases run ``grpolab.cli.main`` in-process (an uncaught exception would fail the test just as a
traceback would); one runs the real ``python -m grpolab.cli`` to check stderr end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.advantages import TokenStatistics, available, compute_advantages, info
from grpolab.rewards import score_batch

TINY = ["--steps", "2", "--prompts-per-step", "4", "--eval-limit", "4", "--eval-samples", "0", "--no-eval-start",
        "--checkpoint-every", "0", "--threads", "1", "--no-progress"]

VERIFIERS = '''
def nan(completion, reference):
    return float("nan")
def inf(completion, reference):
    return float("inf")
def none(completion, reference):
    return None
def raises(completion, reference):
    raise RuntimeError("verifier bug")
def text(completion, reference):
    return "yes"
def half(completion, reference):
    return 0.5
def huge(completion, reference):
    return 1e300
def one_argument(completion):
    return 1.0
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-input")
    (root / "reliability_verifiers.py").write_text(VERIFIERS)
    (root / "empty-model").mkdir()
    (root / "pickle-model").mkdir()
    (root / "pickle-model" / "config.json").write_text('{"model_type": "llama"}')
    (root / "pickle-model" / "pytorch_model.bin").write_bytes(b"\x80\x04never unpickled")
    (root / "a-file").write_text("not a directory")
    good = '{"question": "1+1?", "answer": "#### 2"}\n'
    (root / "not-json.jsonl").write_text(good + "{oops\n")
    (root / "no-field.jsonl").write_text(good + '{"question": "2+2?"}\n')
    (root / "wrong-field.jsonl").write_text(good + '{"question": 3, "answer": "#### 3"}\n')
    texts = {"unknown.yaml": "stepz: 3\n", "bad.yaml": "steps: [1,\n", "bad.toml": "steps = \n",
             "str-for-int.yaml": "group_size: four\n", "float-for-int.yaml": "seed: 2.5\n",
             "bool-for-int.yaml": "seed: true\n", "list-for-float.yaml": "lr: [1, 2]\n",
             "str-for-dict.yaml": "advantage_kwargs: k=2\n", "list.yaml": "- steps\n- 3\n",
             "seed-not-seeds.yaml": "seed: 3\n", "list-for-options.yaml": "task_options: [1]\n",
             "int-option-name.yaml": "task_options: {1: 2}\n", "int-kwarg-name.yaml": "advantage_kwargs: {1: 2}\n",
             "step-schedule.yaml": "lr_schedule: step\n", "duplicate-key.yaml": "lr: 1e-4\nsteps: 3\nlr: 1e-3\n",
             "duplicate-nested-key.yaml": "task_options: {digits: 2, digits: 3}\n",
             "duplicate-key.toml": "lr = 1e-4\nlr = 1e-3\n"}
    for name, text in texts.items():
        (root / name).write_text(text)
    (root / "binary.yaml").write_bytes(b"\xff\xfe\x00\x80garbage")
    # file-task data: a bad byte far past the first 4 KB (read ahead of the line loop), JSON nested past
    # Python's recursion limit, an integer past Python's 4,300-digit limit; config files: the same two
    qa = '{"question": "1+1?", "answer": "2"}\n' * 3000
    (root / "late-bad-byte.jsonl").write_bytes(qa.encode() + b'{"question": "\xff", "answer": "1"}\n')
    (root / "bad-byte.csv").write_bytes(b"question,answer\n\xff\xfe,1\n")
    (root / "late-bad-byte.json").write_bytes(b"[" + qa.replace("\n", ",").encode() + b'{"question": "\xff"}]')
    (root / "deep.jsonl").write_text(qa + "[" * 100_000 + "]" * 100_000 + "\n")
    (root / "deep.json").write_text("[" + "[" * 100_000 + "]" * 100_000 + "]")
    (root / "huge-int.jsonl").write_text(qa + '{"question": "q", "answer": ' + "9" * 5000 + "}\n")
    (root / "deep.yaml").write_text("task_options: " + "[" * 100_000 + "]" * 100_000 + "\n")
    (root / "deep.toml").write_text("task_options = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (root / "huge-int.yaml").write_text("seed: " + "9" * 5000 + "\n")
    (root / "huge-int.toml").write_text("seed = " + "9" * 5000 + "\n")
    (root / "array-row.jsonl").write_text(qa + "[1, 2]\n")  # a row that is not an object
    samples = '{"doc_id": 0, "target": "2", "resps": [["2"]], "filter": "none"}\n'
    (root / "bad-byte").mkdir()  # lm-eval samples: a bad byte, JSON nested past the recursion limit
    (root / "bad-byte" / "samples_gsm8k_2026-01-01T00-00-00.jsonl").write_bytes(
        samples.encode() + b'{"doc_id": 1, "target": "caf\xe9", "resps": [["1"]], "filter": "none"}\n')
    (root / "deep-samples").mkdir()
    (root / "deep-samples" / "samples_gsm8k_2026-01-01T00-00-00.jsonl").write_text(
        samples + "[" * 100_000 + "]" * 100_000 + "\n")
    (root / "state-json-only").mkdir()  # a folder with an unrelated state.json and no data
    (root / "state-json-only" / "state.json").write_text('{"step": 3}')
    return root


# argv (with {d} = the fixture directory) -> words the one-line message must contain
TRAIN_ERRORS = {
    "unknown estimator": (["--advantage", "nope"], ("'nope'", "choose one of", "grpo")),
    "unknown task": (["--task", "nope"], ("unknown task 'nope'", "arith")),
    "unknown verifier": (["--verifier", "nope"], ("unknown verifier 'nope'", "dotted import path")),
    "verifier module missing": (["--verifier", "no_such_pkg.mod:fn"], ("cannot import", "PYTHONPATH")),
    "verifier attribute missing": (["--verifier", "reliability_verifiers:nope"], ("has no attribute 'nope'",)),
    "missing data file": (["--task", "gsm8k", "--data", "{d}/missing.jsonl"], ("missing.jsonl does not exist",)),
    "jsonl row not JSON": (["--task", "gsm8k", "--data", "{d}/not-json.jsonl"], ("not-json.jsonl:2", "not valid JSON")),
    "jsonl row missing field": (["--task", "gsm8k", "--data", "{d}/no-field.jsonl"], ("no-field.jsonl:2", "'answer'")),
    "jsonl field wrong type": (["--task", "gsm8k", "--data", "{d}/wrong-field.jsonl"], (":2", "not a string")),
    "data for a generated task": (["--data", "{d}/no-field.jsonl"], ("drop --data",)),
    "model dir without files": (["--model", "{d}/empty-model"], ("no .safetensors weights", "safe_serialization")),
    "model dir with only pickle": (["--model", "{d}/pickle-model"], ("only safetensors (no pickle)",)),
    "model path is a file": (["--model", "{d}/a-file"], ("not a directory",)),
    "unwritable --out": (["--out", "{d}/a-file/run"], ("cannot write to output directory", "writable --out")),
    "config unknown key": (["--config", "{d}/unknown.yaml"], ("unknown setting(s) stepz", "known settings")),
    "config bad YAML": (["--config", "{d}/bad.yaml"], ("bad.yaml is not valid YAML",)),
    "config bad TOML": (["--config", "{d}/bad.toml"], ("bad.toml is not valid TOML",)),
    "config str for int": (["--config", "{d}/str-for-int.yaml"], ("group_size must be of type int", "'four'")),
    "config float for int": (["--config", "{d}/float-for-int.yaml"], ("seed must be of type int", "2.5")),
    "config bool for int": (["--config", "{d}/bool-for-int.yaml"], ("seed must be of type int", "True")),
    "config list for float": (["--config", "{d}/list-for-float.yaml"], ("lr must be of type float",)),
    "config str for dict": (["--config", "{d}/str-for-dict.yaml"], ("advantage_kwargs must be of type dict",)),
    "config list for task options": (["--config", "{d}/list-for-options.yaml"], ("task_options must be of type dict",)),
    "config task option named by a number": (["--config", "{d}/int-option-name.yaml"],
                                             ("task_options keys must be names", "got 1 (int)")),
    "config estimator kwarg named by a number": (["--config", "{d}/int-kwarg-name.yaml"],
                                                 ("advantage_kwargs keys must be names", "got 1 (int)")),
    "config not a mapping": (["--config", "{d}/list.yaml"], ("must hold a mapping",)),
    "config not UTF-8": (["--config", "{d}/binary.yaml"], ("binary.yaml is not UTF-8",)),
    "config missing": (["--config", "{d}/missing.yaml"], ("missing.yaml does not exist",)),
    "config duplicate key": (["--config", "{d}/duplicate-key.yaml"],
                             ("duplicate-key.yaml", "sets 'lr' twice (line 1 and line 3)", "keep one")),
    "config duplicate nested key": (["--config", "{d}/duplicate-nested-key.yaml"],
                                    ("sets 'digits' twice (line 1 and line 1)",)),
    "config duplicate key TOML": (["--config", "{d}/duplicate-key.toml"], ("duplicate-key.toml is not valid TOML",)),
    "lr NaN": (["--lr", "nan"], ("lr must be a finite number",)),
    "temperature inf": (["--temperature", "inf"], ("temperature must be a finite number",)),
    "beta NaN": (["--beta", "nan"], ("beta must be a finite number",)),
    "epsilon NaN": (["--epsilon-low", "nan"], ("epsilon_low must be a finite number",)),
    "weight decay NaN": (["--weight-decay", "nan"], ("weight_decay must be a finite number",)),
    "max grad norm NaN": (["--max-grad-norm", "nan"], ("max_grad_norm must be a finite number",)),
    "lr zero": (["--lr", "0"], ("lr must be > 0",)),
    "adam betas out of range": (["--adam-betas", "2,3"], ("adam_betas must be two numbers in [0, 1)",)),
    "adam betas one value": (["--adam-betas", "0.9"], ("adam_betas must be two numbers",)),
    "keep no checkpoint": (["--keep-checkpoints", "0"], ("keep_checkpoints must be >= 1",)),
    "max new tokens negative": (["--max-new-tokens", "-3"], ("max_new_tokens must be >= 1",)),
    "threads negative": (["--threads", "-1"], ("threads must be >= 1",)),
    "unknown loss aggregation": (["--loss-aggregation", "nope"],
                                 ("argument --loss-aggregation: invalid choice: 'nope'", "token_mean", "--help")),
    "config unknown lr schedule": (["--config", "{d}/step-schedule.yaml"],
                                   ("lr_schedule must be constant, linear or cosine, got 'step'",)),
    "steps negative": (["--steps", "-1"], ("steps must be >= 0",)),
    "group size zero": (["--group-size", "0"], ("group_size must be >= 1",)),
    "G = 1 for a group estimator": (["--group-size", "1", "--advantage", "grpo"], ("G >= 2", "sign")),
    "unknown estimator kwarg": (["--advantage-kwargs", '{"nope": 1}'], ("'nope'", "fix --advantage-kwargs")),
    "passk k > G": (["--advantage", "passk", "--advantage-kwargs", '{"k": 9}'], ("1 <= k <= G = 4",)),
    "non-binary rewards, sign": (["--verifier", "reliability_verifiers:half"], ("step 1", "binary rewards")),
    "rewards overflowing float32": (["--verifier", "reliability_verifiers:huge", "--advantage", "reinforce"],
                                    ("step 1", "overflow float32")),
    "verifier with the wrong signature": (["--verifier", "reliability_verifiers:one_argument"],
                                          ("failed on 16 of 16", "takes 1 positional argument", "fn(completion")),
    "verifier that raises": (["--verifier", "reliability_verifiers:raises"],
                             ("16 of 16", "RuntimeError: verifier bug")),
    "verifier returning text": (["--verifier", "reliability_verifiers:text"], ("16 of 16", "could not convert")),
    "checkpoint every negative": (["--checkpoint-every", "-1"], ("checkpoint_every must be >= 0",)),
    "eval limit zero": (["--eval-limit", "0"], ("eval_limit must be >= 1", "eval_limit: null")),
    "task limit zero": (["--task-limit", "0"], ("task_limit must be >= 1",)),
    "task limit on a streamed task": (["--task", "reverse", "--task-limit", "10"], ("fresh train prompts", "drop it")),
    "warm-up negative": (["--warmup-steps", "-2"], ("warmup_steps must be >= 0",)),
    "more prompts per step than the task has": (["--task", "arith", "--prompts-per-step", "1000"],
                                                ("prompts_per_step 1000", "500 train prompts", "--prompts-per-step")),
    "task option max_new_tokens 0": (["--task-options", '{"max_new_tokens": 0}'],
                                     ("max_new_tokens must be an integer",)),
    "task option max_new_tokens text": (["--task-options", '{"max_new_tokens": "8"}'], ("integer >= 1, got '8'",)),
    "task option chat template text": (["--task-options", '{"use_chat_template": "no"}'], ("true or false",)),
    "seed past 64 bits": (["--seed", str(10**23)], ("seed must be at most 4294967295", str(10**23))),
    "seed in float notation": (["--seed", "1e23"], ("--seed: invalid int value: '1e23'",)),
    "seed negative": (["--seed", "-1"], ("seed must be >= 0",)),
    "file data bad byte after 4 KB": (["--task", "file", "--data", "{d}/late-bad-byte.jsonl"],
                                      ("late-bad-byte.jsonl:3001: not UTF-8 text", "save the file as UTF-8")),
    "file data JSON array bad byte after 4 KB": (["--task", "file", "--data", "{d}/late-bad-byte.json"],
                                                 ("late-bad-byte.json: not UTF-8 text", "save the file as UTF-8")),
    "file data CSV bad byte": (["--task", "file", "--data", "{d}/bad-byte.csv"],
                               ("bad-byte.csv: not UTF-8 text", "save the file as UTF-8")),  # was: "check the file"
    "temperature 0": (["--temperature", "0"], ("temperature must be > 0, got 0.0",)),
    "top-p above 1": (["--top-p", "1.5"], ("top_p must be in (0, 1]", "got 1.5")),
    "gsm8k data bad byte after 4 KB": (["--task", "gsm8k", "--data", "{d}/late-bad-byte.jsonl"],
                                       ("late-bad-byte.jsonl:3001: not UTF-8 text",)),
    "file data nested too deeply": (["--task", "file", "--data", "{d}/deep.jsonl"],
                                    ("deep.jsonl:3001", "nested too deeply", "flatten")),
    "file data JSON array nested too deeply": (["--task", "file", "--data", "{d}/deep.json"],
                                               ("deep.json", "nested too deeply", "flatten")),
    "file data integer of 5000 digits": (["--task", "file", "--data", "{d}/huge-int.jsonl"],
                                         ("huge-int.jsonl:3001", "more than 4300 digits")),
    "file data row that is a JSON array": (["--task", "file", "--data", "{d}/array-row.jsonl", "--prompt-column",
                                            "question"], ("array-row.jsonl:3001: a JSON list", "write each row as an "
                                                          "object, or remove the line")),
    "file task option of the wrong type": (["--task", "file", "--data", "{d}/late-bad-byte.jsonl", "--task-options",
                                            '{"test_fraction": "0.2"}'],
                                           ("option test_fraction must be a number between 0 and 1", "'0.2' (str)")),
    "file task limit as text": (["--task", "file", "--data", "{d}/late-bad-byte.jsonl", "--task-options",
                                 '{"limit": "3"}'], ("option limit must be a positive whole number or null",)),
    "data folder with an unrelated state.json": (["--task", "file", "--data", "{d}/state-json-only"],
                                                 ("state-json-only holds no train/test files", "train.jsonl")),
    "config nested too deeply YAML": (["--config", "{d}/deep.yaml"], ("deep.yaml", "nested too deeply", "flatten")),
    "config nested too deeply TOML": (["--config", "{d}/deep.toml"], ("deep.toml", "nested too deeply", "flatten")),
    "config integer of 5000 digits YAML": (["--config", "{d}/huge-int.yaml"],
                                           ("huge-int.yaml", "more than 4300 digits", "shorten")),
    "config integer of 5000 digits TOML": (["--config", "{d}/huge-int.toml"],
                                           ("huge-int.toml", "more than 4300 digits", "shorten")),
}


@pytest.mark.parametrize("case", TRAIN_ERRORS)
def test_train_bad_input_is_one_line_exit_2(case: str, files: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(files))
    extra, needles = TRAIN_ERRORS[case]
    extra = [arg.replace("{d}", str(files)) for arg in extra]
    out = [] if "--out" in extra else ["--out", str(tmp_path / "run")]
    code, err = run_cli(["train", *out, *TINY, *extra], capsys)
    assert_one_line_error(code, err, *needles)
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.exists() or metrics.read_text() == "", "a failing run must not log steps"


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["compare", "--estimators", "nope", "--out", "{t}/c"], ("unknown estimator 'nope'",)),
        (["compare", "--group-sizes", "a,b", "--out", "{t}/c"], ("comma-separated integers",)),
        (["compare", "--estimators", "grpo", "--group-sizes", "1", "--out", "{t}/c"], ("group sizes >= 2",)),
        (["compare", "--seeds", "0", "--out", "{t}/c"], ("seeds must be >= 1",)),
        (["compare", "--group-size", "8", "--out", "{t}/c"], ("sets group_size for each run", "use --group-sizes")),
        (["compare", "--advantage", "dr_grpo", "--out", "{t}/c"], ("--advantage would be ignored", "--estimators")),
        (["compare", "--seed", "3", "--out", "{t}/c"], ("--seed would be ignored", "use --seeds")),
        (["compare", "--dynamic-sampling", "--out", "{t}/c"], ("dynamic_sampling", "NAME+dynamic in --estimators")),
        (["compare", "--config", "{d}/seed-not-seeds.yaml", "--out", "{t}/c"], ("sets seed for each run", "--seeds")),
        (["compare", "--checkpoint-every", "-1", "--out", "{t}/c"], ("checkpoint_every must be >= 0",)),
        (["eval", "--max-new-tokens", "-5", "--limit", "2"], ("max_new_tokens must be >= 1",)),
        (["eval", "--n", "-1", "--limit", "2"], ("eval_samples must be >= 0",)),
        (["gradients", "--prompts", "0"], ("prompts_per_step must be >= 1",)),
        (["compare", "--config", "{d}/unknown.yaml", "--out", "{t}/c"], ("unknown setting(s) stepz",)),
        (["compare", "--estimators", "sign", "--seeds", "1", "--out", "{d}/a-file/c"], ("Not a directory", "a-file")),
        (["eval", "--model", "{d}/pickle-model"], ("only safetensors (no pickle)",)),
        (["eval", "--n", "0", "--limit", "2", "--out", "{d}/a-file/e.json"], ("a-file is a file, not a folder",)),
        (["eval", "--from-samples", "{d}/bad-byte", "--out", "{t}/no-folder/e.json"], ("no-folder does not exist",)),
        (["eval", "--task", "math500", "--data", "{d}/missing.jsonl"], ("missing.jsonl does not exist",)),
        (["eval", "--from-samples", "{d}/bad-byte"], ("not UTF-8 text", "re-encode the file or re-run lm-eval")),
        (["eval", "--from-samples", "{d}/deep-samples"], (", line 2", "nested too deeply", "flatten")),
        (["audit", "{t}/nothing-here"], ("nothing-here",)),
        (["audit", "{t}/nothing-here", "--threshold", "nan"], ("--threshold must be a finite number, got nan",)),
        (["audit", "{t}/nothing-here", "--threshold", "inf"], ("--threshold must be a finite number, got inf",)),
        (["audit", "{t}/nothing-here", "--threshold=-inf"], ("--threshold must be a finite number, got -inf",)),
        (["audit", "{t}/nothing-here", "--html", "{t}"], ("is a folder", "give a file name")),
        (["audit", "{t}/nothing-here", "--html", "{t}/no-folder/a.html"], ("the folder", "no-folder does not exist")),
        (["gradients", "--seed", str(10**23)], ("seed must be at most 4294967295",)),
        (["gradients", "--seed", "-1"], ("seed must be >= 0",)),
        (["mechanism", "{t}", "--seed", str(10**23)], ("seed must be at most 4294967295",)),
        (["compare", "--workers", "0", "--out", "{t}/c"], ("workers must be >= 1",)),
        (["compare", "--workers", "-1", "--out", "{t}/c"], ("workers must be >= 1",)),
        (["compare", "--group-sizes", "2,2", "--out", "{t}/c"], ("group_sizes names 2 twice", "once")),
        (["compare", "--estimators", "sign,dr_grpo,sign", "--out", "{t}/c"], ("estimators names sign twice",)),
        (["compare", "--estimators", "sign,sign+dynamic,sign+dynamic", "--out", "{t}/c"],
         ("estimators names sign+dynamic twice",)),
        (["compare", "--estimators", "sign,sign+dynamic+dynamic", "--out", "{t}/c"],
         ("'sign+dynamic+dynamic' names the remedy +dynamic twice", "name each remedy once")),
        (["compare", "--estimators", "dr_grpo+mask+dynamic,dr_grpo+dynamic+mask", "--out", "{t}/c"],
         ("names the arm dr_grpo+dynamic+mask twice", "'dr_grpo+mask+dynamic' and 'dr_grpo+dynamic+mask'")),
        (["compare", "--lrs", "1e-4,3e-4,0.0001", "--out", "{t}/c"], ("lrs names 0.0001 twice",)),
        (["compare", "--seeds", str(10**20), "--out", "{t}/c"], ("seeds must be at most 1000", "1000 and up")),
        (["compare", "--selection-seeds", str(10**20), "--out", "{t}/c"], ("selection_seeds must be at most 1000",)),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) and len(value) > 2 else None,
)
def test_other_commands_bad_input_is_one_line_exit_2(argv: list[str], needles: tuple[str, ...], files: Path,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = [arg.replace("{d}", str(files)).replace("{t}", str(tmp_path)) for arg in argv]
    code, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, *needles)


def test_audit_of_integer_ids_in_one_file_and_string_ids_in_another_is_one_line(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    import pandas as pd

    logs = tmp_path / "logs"
    logs.mkdir()
    for name, ids in (("a.parquet", [1, 1, 2, 2]), ("b.parquet", ["x", "x", "y", "y"])):
        pd.DataFrame({"step": [1] * 4, "prompt_id": ids, "reward": [1.0, 0.0, 1.0, 1.0],
                      "completion": ["c"] * 4}).to_parquet(logs / name)
    code, err = run_cli(["audit", str(logs)], capsys)  # was: an 18-line pyarrow schema dump
    assert_one_line_error(code, err, "prompt_id", "a.parquet", "b.parquet")


def test_bad_flag_values_are_argparse_errors(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    for argv in (["train", "--advantage-kwargs", "[1]"], ["train", "--steps", "two"], ["train", "--nope"]):
        code, err = run_cli([*argv, "--out", str(tmp_path)], capsys)
        assert code == 2 and "Traceback" not in err and "error:" in err.splitlines()[-1], err


def test_the_real_cli_prints_no_traceback(files: Path, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "grpolab.cli", "train", "--model", str(files / "pickle-model"),
                             "--out", str(tmp_path / "run"), *TINY], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "only safetensors (no pickle)" in result.stderr


# ---------------------------------------------------------------------------- bad rewards in a real run


@pytest.mark.parametrize(("verifier", "errors"), [("nan", 0), ("inf", 0), ("none", 0)])
def test_unscorable_rewards_train_on_with_a_finite_loss(verifier: str, errors: int, files: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(files))
    code, err = run_cli(["train", "--out", str(tmp_path / "run"), *TINY, "--advantage", "grpo",
                      "--verifier", f"reliability_verifiers:{verifier}"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert isinstance(row["loss/total"], float) and np.isfinite(row["loss/total"]), row  # NaN is logged null
        assert row["rollout/unscorable"] == 16 and row["rollout/verifier_errors"] == errors
        assert row["loss/trained_sequences"] == 0  # every advantage is 0: nothing reaches the loss


def test_group_size_one_trains_with_a_fixed_reference_estimator(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, err = run_cli(["train", "--out", str(tmp_path / "run"), *TINY, "--group-size", "1"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(row["loss/total"]) and row["loss/trained_sequences"] == 4 for row in rows)


# ---------------------------------------------------------------------------- the scoring and advantages APIs


class _Weird:
    def __float__(self) -> float:
        raise ArithmeticError("no float")


@pytest.mark.parametrize(
    ("value", "reward", "errors"),
    [
        (1, 1.0, 0), (True, 1.0, 0), (np.float32(0.0), 0.0, 0), (torch.tensor(1.0), 1.0, 0), ("1", 1.0, 0),
        (None, None, 0), (float("nan"), None, 0), (float("inf"), None, 0), (-float("inf"), None, 0),
        ("yes", None, 1), ([1.0], None, 1), ({}, None, 1), (10**400, None, 1), (_Weird(), None, 1),
        (torch.ones(2), None, 1), (RuntimeError("raised"), None, 1), (KeyError("raised"), None, 1),
    ],
    ids=lambda value: repr(value)[:24],
)
def test_score_batch_never_raises_for_a_verifier(value: object, reward: float | None, errors: int) -> None:
    def verifier(completion: str, reference: str) -> object:
        if isinstance(value, Exception):
            raise value
        return value

    scores = score_batch(verifier, ["a", "b"], ["a", "b"])
    expected = np.full(2, np.nan if reward is None else reward)
    np.testing.assert_array_equal(scores.rewards, expected)
    assert scores.errors == 2 * errors and scores.unscorable == (2 if reward is None else 0)


@settings(max_examples=60, deadline=None, database=None)
@given(
    name=st.sampled_from(available()),
    rewards=hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
                       elements=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                          st.sampled_from([0.0, 1.0, np.nan]))),
    kind=st.sampled_from(["float64", "float32", "list"]),
)
def test_advantages_are_finite_or_a_value_error(name: str, rewards: np.ndarray, kind: str) -> None:
    """Any array (any rank, empty groups, NaN, +-inf, 1e308) gives finite advantages of its shape, or a
    ValueError that names the estimator; never another exception, never NaN or inf."""
    source = {"float64": rewards, "float32": rewards.astype(np.float32), "list": rewards.tolist()}[kind]
    try:
        result = compute_advantages(name, source)
    except ValueError as error:
        assert repr(name) in str(error)
        return
    # a nested list cannot hold the trailing empty dimensions of e.g. shape (1, 0, 0): it reads as (1, 0)
    expected = np.asarray(source).shape if kind == "list" else rewards.shape
    assert result.shape == expected and torch.isfinite(result).all()


@pytest.mark.parametrize("name", ["reinforce", "nsr", "fixed_baseline"])
def test_finite_float64_rewards_that_overflow_float32_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        compute_advantages(name, [[1e308, -1e308]])  # a list gives float32 advantages


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_empty_groups_and_batches_keep_their_shape(shape: tuple[int, int]) -> None:
    rows = shape[0] * shape[1]
    statistics = TokenStatistics.uniform(rows)  # one token per completion; only optimal_token_baseline reads them
    for name in available():
        try:
            result = compute_advantages(name, np.zeros(shape), lengths=np.zeros(shape), token_statistics=statistics)
        except ValueError as error:  # G = 0 < 2 for a group estimator
            assert "G >= 2" in str(error), name
            continue
        assert result.shape == ((rows, 1) if info(name).needs_token_statistics else shape), name


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_audit_into_a_closed_pipe_exits_quietly_with_141(json_flag: list[str], tmp_path: Path) -> None:
    """``grpolab audit ... | head`` where head has exited: exit 141 (128 + SIGPIPE, as a shell tool), nothing on
    stderr; was: exit 1 with nothing said, or "Broken pipe; check the disk"."""
    import pandas as pd

    steps = np.repeat(np.arange(1, 41), 8)
    rewards = (np.arange(len(steps)) % 3 == 0).astype(float)
    table = pd.DataFrame({"step": steps, "prompt_id": [f"q{i // 4}" for i in range(len(steps))], "reward": rewards})
    table.to_parquet(tmp_path / "log.parquet")
    read, write = os.pipe()
    os.close(read)  # the reader (head) is gone before the first line
    result = subprocess.run([sys.executable, "-m", "grpolab.cli", "audit", str(tmp_path / "log.parquet"), *json_flag],
                            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(write)
    assert (result.returncode, result.stderr) == (141, "")
