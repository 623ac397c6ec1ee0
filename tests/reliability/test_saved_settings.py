"""A run's saved settings (config.yaml) are never silently replaced by the defaults: written atomically, and
checked on --resume against being empty, cut short, missing keys, deleted, or different from the settings
its newest checkpoint was trained under. Config files cannot expand YAML aliases."""

from __future__ import annotations

import errno
import json
import os
import shlex
from pathlib import Path

import pytest
import yaml
from tests.reliability.conftest import RUN_FLAGS, assert_one_line_error, run_cli

from grpolab.config import TrainConfig, load_config_file, save_config
from grpolab.config.files import SAVED_HEADER
from grpolab.errors import UserError
from grpolab.train import runlog

EXTEND = ["--steps", "3", "--no-progress", "--threads", "1"]


def _trained_steps(run: Path) -> list[int]:
    return [row["step"] for row in runlog.read_metrics(run / "metrics.jsonl")]


def _resume(run: Path, capsys, *flags: str) -> tuple[int, str]:
    return run_cli(["train", "--out", str(run), "--resume", *flags], capsys)


def test_resume_with_an_empty_config_yaml_is_refused_and_trains_nothing(finished_run, capsys):
    (finished_run / "config.yaml").write_text("")
    before = (finished_run / "metrics.jsonl").read_bytes()
    code, err = _resume(finished_run, capsys, *EXTEND)
    line = assert_one_line_error(code, err, "config.yaml is empty", "--advantage dr_grpo", "--lr 0.0003")
    assert "step-000002" in line
    assert (finished_run / "metrics.jsonl").read_bytes() == before
    assert (finished_run / "config.yaml").read_text() == ""
    assert not (finished_run / "checkpoints" / "step-000003").exists()


def test_a_cut_short_config_yaml_is_refused_not_filled_with_defaults(finished_run, capsys):
    path = finished_run / "config.yaml"
    text = path.read_text()
    path.write_text(text[: len(text) // 2].rsplit("\n", 1)[0] + "\n")  # whole lines, so still valid YAML
    code, err = _resume(finished_run, capsys, *EXTEND)
    assert_one_line_error(code, err, "config.yaml is cut short", "rerun --resume with the settings of step-000002")
    assert _trained_steps(finished_run) == [1, 2]


def test_a_config_yaml_missing_a_setting_is_refused(finished_run, capsys):
    path = finished_run / "config.yaml"
    path.write_text("".join(line for line in path.read_text().splitlines(keepends=True)
                            if not line.startswith("advantage:")))
    code, err = _resume(finished_run, capsys, *EXTEND)
    assert_one_line_error(code, err, "config.yaml is damaged", "of the")
    assert _trained_steps(finished_run) == [1, 2]


def test_a_deleted_config_yaml_is_refused_naming_the_checkpoints_settings_which_restore_it(finished_run, capsys):
    (finished_run / "config.yaml").unlink()
    code, err = _resume(finished_run, capsys, *EXTEND)
    line = assert_one_line_error(code, err, "has no config.yaml", "advantage 'dr_grpo'", "gives advantage 'sign'",
                                 "--advantage dr_grpo")
    assert _trained_steps(finished_run) == [1, 2]
    words = shlex.split(line.split("rerun --resume with the settings of step-000002: ")[1])
    given = {word: (words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None)
             for i, word in enumerate(words) if word.startswith("--")}
    assert (given["--advantage"], given["--lr"], given["--steps"]) == ("dr_grpo", "0.0003", "2")
    assert "--no-eval-start" in given
    restoring = [word for flag, value in given.items() if flag != "--steps" for word in (flag, value) if word]
    code, err = _resume(finished_run, capsys, *restoring, *EXTEND)
    assert code == 0, err
    assert _trained_steps(finished_run) == [1, 2, 3]
    restored = load_config_file(finished_run / "config.yaml")
    assert (restored["advantage"], restored["lr"], restored["steps"]) == ("dr_grpo", 3e-4, 3)


def test_a_config_yaml_edited_away_from_the_checkpoint_is_refused(finished_run, capsys):
    path = finished_run / "config.yaml"
    path.write_text(path.read_text().replace("advantage: dr_grpo", "advantage: grpo"))
    code, err = _resume(finished_run, capsys, *EXTEND)
    assert_one_line_error(code, err, "differs from its checkpoint step-000002", "advantage 'dr_grpo'",
                          "gives advantage 'grpo'")


def test_an_old_config_yaml_without_the_marker_resumes_with_new_settings_at_their_defaults(finished_run, capsys):
    path = finished_run / "config.yaml"
    values = yaml.safe_load(path.read_text())
    values.pop("tensorboard")  # a setting added after this file was written
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    for checkpoint in (finished_run / "checkpoints").glob("step-*"):  # old checkpoints recorded no settings
        state = json.loads((checkpoint / "state.json").read_text())
        state.pop("settings")
        (checkpoint / "state.json").write_text(json.dumps(state))
        checksums = json.loads((checkpoint / "checksums.json").read_text())
        import hashlib
        checksums["state.json"] = hashlib.sha256((checkpoint / "state.json").read_bytes()).hexdigest()
        (checkpoint / "checksums.json").write_text(json.dumps(checksums))
    code, err = _resume(finished_run, capsys, *EXTEND)
    assert code == 0, err
    assert _trained_steps(finished_run) == [1, 2, 3]
    assert (finished_run / "config.yaml").read_text().startswith(SAVED_HEADER)


def test_a_full_disk_while_saving_the_config_keeps_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    save_config(TrainConfig(advantage="dr_grpo"), path)
    before = path.read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "config.yaml")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UserError, match="disk full"):
        save_config(TrainConfig(advantage="sign"), path)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_the_checkpoint_records_the_settings_it_was_trained_under(finished_run):
    state = json.loads((finished_run / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["settings"]["advantage"] == "dr_grpo" and state["settings"]["lr"] == 3e-4


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("advantage_kwargs:\n" + "\n".join("  " + line for line in bomb) + "\n")
    code, err = run_cli(["train", "--config", str(path), "--out", str(tmp_path / "run"), *RUN_FLAGS], capsys)
    assert_one_line_error(code, err, "bomb.yaml is not valid YAML", "aliases")
    assert not (tmp_path / "run").exists()




def _trl_run(run: Path, config: TrainConfig) -> Path:
    """A TRL-engine run directory as the engine leaves it after step 2: its config.yaml, two logged steps and a
    sealed ``checkpoints/checkpoint-2`` whose state.json records the settings (``record_state``)."""
    from grpolab.train.trl_engine.checkpoints import record_state, seal

    checkpoint = run / "checkpoints" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    save_config(config, run / "config.yaml")
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    record_state(checkpoint, config)
    seal(checkpoint)
    return run


@pytest.mark.parametrize("edit", [{"advantage": "dr_grpo"}, {"engine": "grpolab"}])
def test_a_trl_run_whose_config_yaml_was_edited_is_refused_on_resume(tmp_path, capsys, edit):
    """A ``sign`` TRL run edited to ``dr_grpo``, or to ``engine: grpolab`` (before: resumed as ``dr_grpo`` without a
    word; restarted by grpolab's engine from step 0, replacing the logged steps)."""
    trained = TrainConfig(engine="trl", advantage="sign", steps=4, prompts_per_step=2)
    run = _trl_run(tmp_path / "run", trained)
    save_config(trained.replace(**edit), run / "config.yaml")
    before = (run / "metrics.jsonl").read_bytes()
    code, err = _resume(run, capsys, "--no-progress")
    name, value = next(iter(edit.items()))
    assert_one_line_error(code, err, "holds a config.yaml that differs from its checkpoint checkpoint-2",
                          f"trained with {name} {getattr(trained, name)!r}", f"this command gives {name} {value!r}")
    assert (run / "metrics.jsonl").read_bytes() == before


def test_a_checkpoint_from_before_settings_were_recorded_still_names_its_engine(tmp_path):
    from grpolab.train.settings import checked_resume_settings

    run = _trl_run(tmp_path / "run", TrainConfig(engine="trl"))
    (run / "checkpoints" / "checkpoint-2" / "state.json").write_text("{}")  # an older grpolab's state.json
    from grpolab.train.trl_engine.checkpoints import seal

    seal(run / "checkpoints" / "checkpoint-2")
    assert checked_resume_settings(run, TrainConfig(engine="trl")) == TrainConfig(engine="trl")
    save_config(TrainConfig(engine="grpolab"), run / "config.yaml")
    with pytest.raises(UserError, match="trained with engine 'trl'"):
        checked_resume_settings(run, TrainConfig(engine="grpolab"))
