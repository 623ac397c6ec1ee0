"""The TRL engine's checkpoints are sealed with checksums and a damaged newest one is skipped with a warning
(``grpolab.train.trl_engine.checkpoints``), as grpolab's engine does with its own."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("trl")

from grpolab.config import TrainConfig
from grpolab.train.runlog import read_metrics
from grpolab.train.trl_engine.checkpoints import any_checkpoint, latest_checkpoint, seal


def _checkpoint(run_dir: Path, step: int) -> Path:
    path = run_dir / "checkpoints" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (path / "optimizer.pt").write_bytes(bytes(range(256)) * 8)
    (path / "model.safetensors").write_bytes(b"\x01" * 4096)
    seal(path)
    return path


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flipped bit", "empty trainer_state", "truncated optimizer", "no seal",
                                    "garbage seal", "missing file"])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(damage: str, tmp_path: Path) -> None:
    _checkpoint(tmp_path, 2)
    newest = _checkpoint(tmp_path, 10)  # 10 after 2 as numbers, not as text
    {"flipped bit": lambda: _flip_a_bit(newest / "model.safetensors"),
     "empty trainer_state": lambda: (newest / "trainer_state.json").write_text(""),
     "truncated optimizer": lambda: (newest / "optimizer.pt").write_bytes(b"\x00" * 10),
     "no seal": lambda: (newest / "checksums.json").unlink(),
     "garbage seal": lambda: (newest / "checksums.json").write_text("{not json"),
     "missing file": lambda: (newest / "optimizer.pt").unlink()}[damage]()
    with pytest.warns(UserWarning, match=r"checkpoint-10 is damaged \(.+\); skipping it"):
        assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "checkpoint-2"
    assert any_checkpoint(tmp_path)


def test_only_damaged_sealed_checkpoints_are_refused_and_an_unfinished_save_alone_is_none(tmp_path: Path) -> None:
    """Was: None, so a resume restarted at step 0 and rewrote a trained run's logs. A save killed before its seal
    (TRL writes in place) is no trained state to lose: a fresh start is right then."""
    from grpolab.errors import UserError

    (tmp_path / "checkpoints" / "checkpoint-3").mkdir(parents=True)  # killed inside TRL's first save
    with pytest.warns(UserWarning, match="checkpoint-3 is damaged"):
        assert latest_checkpoint(tmp_path) is None
    (_checkpoint(tmp_path, 2) / "optimizer.pt").write_bytes(b"changed")
    with pytest.warns(UserWarning), pytest.raises(UserError, match=r"\(checkpoint-2 damaged\).*move them aside"):
        latest_checkpoint(tmp_path)


def test_whole_checkpoints_are_taken_newest_first_and_none_without_any(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None and not any_checkpoint(tmp_path)
    _checkpoint(tmp_path, 9)
    _checkpoint(tmp_path, 10)
    assert latest_checkpoint(tmp_path).name == "checkpoint-10"


def test_rotation_removes_older_checkpoints_only_behind_the_newest_sealed_ones(tmp_path: Path) -> None:
    from grpolab.train.trl_engine.checkpoints import prune

    for step in (1, 2, 3):
        _checkpoint(tmp_path, step)
    unsealed = tmp_path / "checkpoints" / "checkpoint-4"
    unsealed.mkdir()  # a save in progress (or killed): not counted, not removed
    prune(tmp_path, 2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint-2", "checkpoint-3",
                                                                          "checkpoint-4"]
    prune(tmp_path, 5)  # fewer sealed than kept: nothing goes
    assert len(list((tmp_path / "checkpoints").iterdir())) == 3


def test_a_trl_run_seals_its_checkpoints_and_resumes_past_a_damaged_one(tmp_path: Path) -> None:
    from grpolab.train import train

    tiny = dict(engine="trl", steps=2, prompts_per_step=2, group_size=2, eval_limit=4, eval_samples=1,
                max_new_tokens=8, checkpoint_every=1, keep_checkpoints=2, progress=False, threads=1, lr=1e-3,
                eval_start=False)
    run = tmp_path / "run"
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecation noise from grpolab's calls or TRL's loop
        train(TrainConfig(**tiny), run)
    assert latest_checkpoint(run).name == "checkpoint-2"  # sealed by the run, and whole
    assert (run / "checkpoints" / "checkpoint-1" / "checksums.json").is_file()  # keep_checkpoints 2: both kept
    (run / "checkpoints" / "checkpoint-2" / "trainer_state.json").write_text("")  # a kill inside TRL's save
    (run / "summary.json").unlink()
    with pytest.warns(UserWarning, match=r"checkpoint-2 is damaged"):
        train(TrainConfig(**tiny), run, resume=True)
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == [1, 2]  # step 2 trained again
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    assert latest_checkpoint(run).name == "checkpoint-2"  # saved again, sealed


def test_a_trl_checkpoint_records_the_data_it_trained_on_and_a_resume_refuses_changed_data(tmp_path: Path) -> None:
    from grpolab.errors import UserError
    from grpolab.train.lifecycle import start_evaluation_key
    from grpolab.train.settings import check_identity
    from grpolab.train.trl_engine.checkpoints import record_state

    data = tmp_path / "qa.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    config = TrainConfig(engine="trl", task="file", verifier="exact", data=str(data))
    checkpoint = _checkpoint(tmp_path, 1)
    record_state(checkpoint, config)
    seal(checkpoint)
    check_identity(checkpoint, config)  # unchanged: resumes
    key = start_evaluation_key(config)
    data.write_text('{"prompt": "1+1=", "answer": "3"}\n')  # one answer edited, same size
    with pytest.raises(UserError, match=r"changed since .* wrote its checkpoint checkpoint-1"):
        check_identity(checkpoint, config)
    assert start_evaluation_key(config) != key  # a cached start evaluation of the old data is not reused
