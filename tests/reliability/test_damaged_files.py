"""Damaged files of a run directory, as a user meets them on --resume or when loading the run: each is one
line naming the file (never a traceback), and a damaged checkpoint that is skipped is named in a warning."""

from __future__ import annotations

import json

import pytest
from tests.reliability.conftest import assert_one_line_error, run_cli

from grpolab.train import runlog

RESUME = ["--steps", "3", "--no-progress", "--threads", "1"]


@pytest.mark.parametrize("log", ["metrics.jsonl", "eval.jsonl"])
@pytest.mark.parametrize("garbage", [b"[1, 2]\n", b'{"no": "step"}\n', b"\xff\xfe not text\n", b"{oops\n"])
def test_a_log_damaged_mid_file_is_one_line_naming_it(finished_run, capsys, log, garbage):
    path = finished_run / log
    assert path.read_bytes().strip()
    path.write_bytes(garbage + path.read_bytes())  # not the last line: not a line torn by a kill
    before = path.read_bytes()
    code, err = run_cli(["train", "--out", str(finished_run), "--resume", *RESUME], capsys)
    assert_one_line_error(code, err, str(path), "move it aside")
    assert path.read_bytes() == before


def test_a_torn_last_line_is_still_skipped(finished_run, capsys):
    with (finished_run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 3, "loss/pol')
    code, err = run_cli(["train", "--out", str(finished_run), "--resume", *RESUME], capsys)
    assert code == 0, err
    assert [row["step"] for row in runlog.read_metrics(finished_run / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.parametrize(("model", "words"), [("", "final model in {final} is damaged"),
                                             ("final", "the model in {final} is damaged")])
def test_a_damaged_final_model_is_one_line_naming_it(finished_run, capsys, model, words):
    weights = finished_run / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    code, err = run_cli(["eval", "--model", str(finished_run / model), "--eval-limit", "2", "--eval-samples", "0",
                         "--threads", "1"], capsys)
    assert_one_line_error(code, err, words.format(final=finished_run / "final"))


@pytest.mark.parametrize(("command", "words"), [
    (["eval", "--model", "{run}", "--eval-limit", "2", "--eval-samples", "0", "--threads", "1"],
     "the final model in {final} is damaged (model.safetensors does not match its checksum); resume the run"),
    (["eval", "--model", "{final}", "--eval-limit", "2", "--eval-samples", "0", "--threads", "1"],
     "the model in {final} is damaged (model.safetensors does not match its checksum)"),
    (["export", "{run}", "--out", "{out}"], "the final model in {final} is damaged"),
    (["gradients", "--model", "{run}", "--prompts", "1", "--threads", "1"], "the final model in {final} is damaged"),
])
def test_a_flipped_bit_in_the_final_model_is_one_line(finished_run, tmp_path, capsys, command, words):
    # was: one flipped exponent bit took eval from 0.875 to 0.344, exit 0
    assert "model.safetensors" in json.loads((finished_run / "final" / "checksums.json").read_text())
    weights = finished_run / "final" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x40  # the top byte of the last float32: an exponent bit
    weights.write_bytes(bytes(data))
    names = {"run": finished_run, "final": finished_run / "final", "out": tmp_path / "export"}
    code, err = run_cli([arg.format(**names) for arg in command], capsys)
    assert_one_line_error(code, err, words.format(**names))
    assert not (tmp_path / "export").exists()


def test_a_damaged_checkpoint_is_skipped_with_a_warning_naming_it(finished_run, capsys):
    weights = finished_run / "checkpoints" / "step-000002" / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match=r"checkpoint .*step-000002 is damaged .*; skipping it"):
        code, err = run_cli(["train", "--out", str(finished_run), "--resume", *RESUME], capsys)
    assert code == 0, err
    assert json.loads((finished_run / "resumes.jsonl").read_text().splitlines()[-1])["from_step"] == 1
