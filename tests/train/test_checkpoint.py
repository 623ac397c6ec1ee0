"""Checkpoints (grpolab.train.checkpoint): round trip, pruning, a damaged newest checkpoint, and the optimizer state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from grpolab.errors import UserError
from grpolab.train.checkpoint import (
    checkpoint_settings,
    load_latest,
    optimizer_tensors,
    restore_optimizer,
    save_checkpoint,
)

pytestmark = pytest.mark.fast


def _weights(value: float) -> dict[str, torch.Tensor]:
    return {"layer.weight": torch.full((3, 2), value), "layer.bias": torch.arange(3, dtype=torch.float32) + value}


def test_the_newest_checkpoint_reads_back_as_written(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, 1, _weights(1.0), {"layer.weight/exp_avg": torch.ones(3, 2)}, {"scheduler": 1})
    save_checkpoint(tmp_path, 2, _weights(2.0), {"layer.weight/exp_avg": torch.full((3, 2), 5.0)}, {"scheduler": 2})
    checkpoint = load_latest(tmp_path)
    assert checkpoint is not None and checkpoint.step == 2 and checkpoint.path.name == "step-000002"
    torch.testing.assert_close(checkpoint.weights["layer.bias"], torch.tensor([2.0, 3.0, 4.0]))
    torch.testing.assert_close(checkpoint.optimizer["layer.weight/exp_avg"], torch.full((3, 2), 5.0))
    assert checkpoint.state == {"scheduler": 2, "step": 2}


def test_only_the_newest_keep_checkpoints_and_no_staging_directories_remain(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / ".tmp-left-by-a-kill").mkdir(parents=True)
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, _weights(step), {}, {}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000003", "step-000004"]


@pytest.mark.parametrize("damage", ["flip a byte", "delete checksums", "truncate state"])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(tmp_path: Path, damage: str) -> None:
    save_checkpoint(tmp_path, 1, _weights(1.0), {}, {}, keep=3)
    newest = save_checkpoint(tmp_path, 2, _weights(2.0), {}, {}, keep=3)
    if damage == "flip a byte":
        data = bytearray((newest / "weights.safetensors").read_bytes())
        data[-1] ^= 0xFF
        (newest / "weights.safetensors").write_bytes(bytes(data))
    elif damage == "delete checksums":
        (newest / "checksums.json").unlink()
    else:
        (newest / "state.json").write_text('{"step": ')
    checkpoint = load_latest(tmp_path)
    assert checkpoint is not None and checkpoint.step == 1
    torch.testing.assert_close(checkpoint.weights["layer.weight"], torch.ones(3, 2))


def test_no_checkpoint_is_none_and_only_damaged_ones_are_refused(tmp_path: Path) -> None:
    """Was: None for a run whose only checkpoint fails its checksums, so a resume restarted at step 0 and rewrote
    the trained run's logs."""
    assert load_latest(tmp_path) is None
    save_checkpoint(tmp_path, 1, _weights(1.0), {}, {})
    (tmp_path / "checkpoints" / "step-000001" / "state.json").write_text(json.dumps({"step": 9}))
    with pytest.warns(UserWarning, match="step-000001 is damaged"), \
            pytest.raises(UserError, match=r"every checkpoint in .* is damaged \(step-000001\).*move .* aside"):
        load_latest(tmp_path)


def test_a_checkpoint_this_user_cannot_read_is_refused_not_skipped(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A group member resuming another's run (files 0600) was told the newest checkpoint was damaged; with every one
    unreadable the run restarted at step 0 and deleted the owner's summary.json."""
    from grpolab.train import checkpoint as module

    save_checkpoint(tmp_path, 1, _weights(1.0), {}, {})
    save_checkpoint(tmp_path, 2, _weights(2.0), {}, {})

    def denied(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(module, "file_sha256", denied)
    with pytest.raises(UserError, match=r"cannot read checkpoint .*step-000002 \(Permission denied: weights"):
        load_latest(tmp_path)


def test_a_restored_optimizer_takes_the_same_next_step() -> None:
    def make() -> tuple[torch.nn.Linear, torch.optim.AdamW]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.9, 0.99))

    def step(model: torch.nn.Linear, optimizer: torch.optim.Optimizer, seed: int) -> None:
        inputs = torch.randn(8, 4, generator=torch.Generator().manual_seed(seed))
        optimizer.zero_grad()
        model(inputs).pow(2).mean().backward()
        optimizer.step()

    model, optimizer = make()
    for seed in range(3):
        step(model, optimizer, seed)
    names = {id(p): n for n, p in model.named_parameters()}
    tensors, extras = optimizer_tensors(optimizer, names)
    assert {f"{n}/{k}" for n in ("weight", "bias") for k in ("exp_avg", "exp_avg_sq")} <= set(tensors)
    copy, restored = make()
    copy.load_state_dict(model.state_dict())
    restore_optimizer(restored, {id(p): n for n, p in copy.named_parameters()}, tensors, extras)
    fresh, fresh_optimizer = make()  # the same weights without the moments: a different step
    fresh.load_state_dict(model.state_dict())
    for pair, seed in (((model, optimizer), 3), ((copy, restored), 3), ((fresh, fresh_optimizer), 3)):
        step(*pair, seed)
    for (name, trained), resumed, unrestored in zip(model.named_parameters(), copy.parameters(), fresh.parameters(),
                                                    strict=True):
        torch.testing.assert_close(resumed, trained, rtol=0, atol=0, msg=name)
        assert not torch.equal(unrestored, trained), name


def test_checkpoints_past_step_999999_sort_by_their_number(tmp_path: Path) -> None:
    """``step-1000000`` sorts before ``step-999999`` as text; was: the newest checkpoint was pruned and
    ``load_latest`` returned step 999,999."""
    for step in (999_998, 999_999, 1_000_000):
        save_checkpoint(tmp_path, step, _weights(float(step % 7)), {}, {}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-1000000", "step-999999"]
    checkpoint = load_latest(tmp_path)
    assert checkpoint is not None and checkpoint.step == 1_000_000
    found = checkpoint_settings(tmp_path)
    assert found is not None and found[0].name == "step-1000000"


def test_the_trl_engines_newest_checkpoint_is_found_by_its_number(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from grpolab.train.trl_engine.checkpoints import latest_checkpoint, seal

    for step in (999_999, 1_000_000):
        (tmp_path / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        seal(tmp_path / "checkpoints" / f"checkpoint-{step}")
    assert latest_checkpoint(tmp_path).name == "checkpoint-1000000"


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_a_checkpoint_has_the_modes_the_umask_gives(tmp_path: Path, umask: int) -> None:
    """Was 0700 folders (mkdtemp) and 0600 files (safetensors) whatever the umask: a group could not resume, read or
    export a run its member trained."""
    import os
    import stat

    old = os.umask(umask)
    try:
        path = save_checkpoint(tmp_path, 1, _weights(1.0), {}, {})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask
    assert {stat.S_IMODE(p.stat().st_mode) for p in path.iterdir()} == {0o666 & ~umask}
