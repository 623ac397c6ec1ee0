"""Fault injection: kill -9 a training run at random points (one of them inside a checkpoint write),
damage checkpoints and interrupt log rewrites; then resume and check that nothing is lost or repeated.

The kill points are drawn from fixed seeds (chosen so that between them every kill lands after each of the
two checkpoint files and after each of steps 2, 3 and 4); ``GRPOLAB_RELIABILITY_SEED`` runs one other seed
instead. The seed is in every assertion message. No kill waits on the wall clock alone: the random kill
(kill 2) may land late on a loaded machine, so the run holds inside its last checkpoint until it does.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from grpolab.config import TrainConfig
from grpolab.train import runlog
from grpolab.train.checkpoint import load_latest, save_checkpoint
from grpolab.train.lifecycle import prepare_eval_log
from grpolab.train.trainer import Trainer

HERE = Path(__file__).parent
STEPS = 8
FLAGS = ["--steps", str(STEPS), "--prompts-per-step", "4", "--group-size", "4", "--eval-limit", "8",
         "--eval-samples", "2", "--checkpoint-every", "1", "--seed", "3", "--threads", "1", "--no-progress"]
CONFIG = TrainConfig(steps=STEPS, prompts_per_step=4, group_size=4, eval_limit=8, eval_samples=2, checkpoint_every=1,
                     seed=3, threads=1, progress=False)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def _launch(command: list[str], out: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The CLI (or the pausing wrapper) in its own session, so that kill -9 hits the whole group."""
    resume = ["--resume"] if (out / "metrics.jsonl").exists() else []
    return subprocess.Popen([sys.executable, *command, "train", "--out", str(out), *resume, *FLAGS],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def _kill_when(process: subprocess.Popen, ready: Callable[[], bool], context: str, delay: float = 0.0) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None, f"{context}: the run ended before the kill: {process.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"{context}: timed out waiting for the kill point"
        time.sleep(0.01)
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()


def _steps(path: Path) -> list[int]:
    return [row["step"] for row in runlog.read_metrics(path)]


def _checkpoint_steps(run: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("step-*"))


def _assert_no_pickle(run: Path) -> None:
    """Every file is safetensors (checked by parsing its header) or text/Parquet: no pickle anywhere."""
    files = [path for path in run.rglob("*") if path.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        assert path.suffix not in PICKLE_SUFFIXES, path
        if path.suffix == ".safetensors":
            size = int.from_bytes(data[:8], "little")
            assert isinstance(json.loads(data[8 : 8 + size]), dict), path
            continue
        assert not (len(data) > 1 and data[0] == 0x80 and 2 <= data[1] <= 5), f"{path} looks like a pickle"
        assert data[:4] != b"PK\x03\x04", f"{path} looks like torch.save's zip format"


def _finite_loss(run: Path) -> None:
    for row in runlog.read_metrics(run / "metrics.jsonl"):
        assert isinstance(row["loss/total"], float), row  # NaN / inf would be logged as null


SEEDS = [int(os.environ["GRPOLAB_RELIABILITY_SEED"])] if os.environ.get("GRPOLAB_RELIABILITY_SEED") else [0, 1, 7]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted reference run, in a fresh process so that no global torch state left by other tests
    differs; one for all seeds."""
    straight = tmp_path_factory.mktemp("straight") / "run"
    reference = subprocess.run([sys.executable, "-m", "grpolab.cli", "train", "--out", str(straight), *FLAGS],
                               capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr[-2000:]
    return straight


@pytest.mark.parametrize("seed", SEEDS)
def test_kill_nine_at_random_points_then_resume_equals_an_uninterrupted_run(
        tmp_path: Path, straight_run: Path, seed: int) -> None:
    rng = random.Random(seed)
    run, marker = tmp_path / "killed", tmp_path / "paused"
    wrapper = [str(HERE / "_pause_in_checkpoint.py")]

    # 1. kill -9 inside the very first checkpoint write (after its weights or its optimizer file)
    pause = {"GRPOLAB_TEST_PAUSE_STEP": "1", "GRPOLAB_TEST_PAUSE_FILE": rng.choice(["weights", "optimizer"]),
             "GRPOLAB_TEST_MARKER": str(marker)}
    context = f"seed {seed}, kill 1 in checkpoint 1 after {pause['GRPOLAB_TEST_PAUSE_FILE']}"
    _kill_when(_launch(wrapper, run, pause), marker.exists, context)
    assert _checkpoint_steps(run) == [] and list((run / "checkpoints").glob(".tmp-*")), context
    assert load_latest(run) is None, f"{context}: a half-written checkpoint was loaded"

    # 2. resume; kill -9 at a random moment after a random step. The run holds inside its last checkpoint
    # (after the weights file), so that a kill which a loaded machine delays, or a fast machine outruns, still
    # lands before the run ends: at the latest there, never after
    after = rng.randint(2, 4)
    delay = rng.uniform(0, 0.15)
    held = tmp_path / "held"
    hold = {"GRPOLAB_TEST_PAUSE_STEP": str(STEPS), "GRPOLAB_TEST_PAUSE_FILE": "weights",
            "GRPOLAB_TEST_MARKER": str(held)}
    context = f"seed {seed}, kill 2 {delay:.2f} s after step {after} was logged"
    _kill_when(_launch(wrapper, run, hold), lambda: len(_steps(run / "metrics.jsonl")) >= after, context, delay)
    newest = _checkpoint_steps(run)[-1]
    context += f" (landed after step {_steps(run / 'metrics.jsonl')[-1]}{', at the hold' if held.exists() else ''})"
    assert after - 1 <= newest < STEPS, f"{context}: newest checkpoint {newest}"

    # 3. resume; kill -9 inside a later checkpoint write, then damage the newest complete checkpoint
    pause_step = rng.randint(newest + 1, STEPS)  # STEPS: after the end evaluation was logged
    pause.update(GRPOLAB_TEST_PAUSE_STEP=str(pause_step), GRPOLAB_TEST_PAUSE_FILE=rng.choice(["weights", "optimizer"]))
    marker.unlink()
    context = f"seed {seed}, kill 3 in checkpoint {pause_step} after {pause['GRPOLAB_TEST_PAUSE_FILE']}"
    _kill_when(_launch(wrapper, run, pause), marker.exists, context)
    complete = _checkpoint_steps(run)
    assert complete[-1] == pause_step - 1, f"{context}: {complete}"
    _flip_byte(run / "checkpoints" / f"step-{complete[-1]:06d}" / "weights.safetensors")
    fallback = load_latest(run)
    assert (fallback.step if fallback else None) == (complete[-2] if len(complete) > 1 else None), \
        f"{context}: the damaged checkpoint was not skipped"

    # 4. resume to the end
    finish = subprocess.run([sys.executable, "-m", "grpolab.cli", "train", "--out", str(run), "--resume", *FLAGS],
                            capture_output=True, text=True, timeout=300)
    assert finish.returncode == 0, f"seed {seed}: {finish.stderr[-2000:]}"
    assert "Traceback" not in finish.stderr

    _assert_same_run(straight_run, run, f"seed {seed}")
    _assert_no_pickle(run)


def _assert_same_run(straight: Path, resumed: Path, context: str) -> None:
    a, b = (load_file(str(r / "final" / "model.safetensors")) for r in (straight, resumed))
    assert a.keys() == b.keys(), context
    for name in a:
        assert torch.equal(a[name], b[name]), f"{context}: final weight {name} differs from the uninterrupted run"
    assert _steps(resumed / "metrics.jsonl") == list(range(1, STEPS + 1)), context
    for x, y in zip(*(runlog.read_metrics(r / "metrics.jsonl") for r in (straight, resumed)), strict=True):
        assert {k: v for k, v in x.items() if not k.startswith("perf/")} == \
            {k: v for k, v in y.items() if not k.startswith("perf/")}, f"{context}: step {x['step']} differs"
    names = sorted(p.name for p in (resumed / "rollouts").iterdir())
    assert names == [f"step-{s:06d}.parquet" for s in range(1, STEPS + 1)], f"{context}: {names}"
    for name in names:
        table = pq.read_table(resumed / "rollouts" / name)
        assert table.equals(pq.read_table(straight / "rollouts" / name)), f"{context}: {name} differs"
        assert set(table.column("step").to_pylist()) == {int(name[5:11])} and table.num_rows == 16
    phases = [row["phase"] for row in runlog.read_metrics(resumed / "eval.jsonl")]
    assert phases == ["start", "end"], f"{context}: eval.jsonl phases {phases}"
    assert json.loads((resumed / "summary.json").read_text())["status"] == "finished"
    _finite_loss(resumed)


# ---------------------------------------------------------------------------- damaged checkpoints


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE = {
    "flipped byte in weights": lambda ck: _flip_byte(ck / "weights.safetensors"),
    "truncated optimizer": lambda ck: (ck / "optimizer.safetensors").write_bytes(
        (ck / "optimizer.safetensors").read_bytes()[:50]),
    "missing checksums": lambda ck: (ck / "checksums.json").unlink(),
    "garbage checksums": lambda ck: (ck / "checksums.json").write_text("{not json"),
    "missing state": lambda ck: (ck / "state.json").unlink(),
    "state edited after checksum": lambda ck: (ck / "state.json").write_text('{"step": 99}'),
    "empty directory": lambda ck: [p.unlink() for p in ck.iterdir()],
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_load_latest_falls_back_past_a_damaged_checkpoint(damage: str, tmp_path: Path) -> None:
    for step in (1, 2):
        weights = {"w": torch.full((64,), float(step))}
        save_checkpoint(tmp_path, step, weights, {"w/exp_avg": torch.zeros(64)}, {"completions_generated": step})
    DAMAGE[damage](tmp_path / "checkpoints" / "step-000002")
    (tmp_path / "checkpoints" / ".tmp-half-written").mkdir()  # a kill inside save_checkpoint leaves this
    checkpoint = load_latest(tmp_path)
    assert checkpoint is not None and checkpoint.step == 1
    assert torch.equal(checkpoint.weights["w"], torch.full((64,), 1.0))


def test_a_resume_past_a_damaged_checkpoint_overwrites_it(tmp_path: Path) -> None:
    config = TrainConfig(**{**CONFIG.to_dict(), "steps": 3, "eval_start": False, "eval_samples": 0,
                            "adam_betas": (0.9, 0.99)})
    Trainer(config, tmp_path / "a").run()
    _flip_byte(tmp_path / "a" / "checkpoints" / "step-000003" / "weights.safetensors")
    resumed = Trainer(config, tmp_path / "a", resume=True)
    assert resumed.start_step == 2
    resumed.run()
    assert load_latest(tmp_path / "a").step == 3
    assert _steps(tmp_path / "a" / "metrics.jsonl") == [1, 2, 3]


# ---------------------------------------------------------------------------- interrupted log rewrites


class _Killed(BaseException):
    """Stands for a kill -9 (or a full disk) in the middle of a write."""


def _die_half_way_through_writes_to(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Any file opened for writing whose name starts with ``name`` gets half of its first write, then the
    process 'dies'; whatever the implementation, the bytes on disk are what a kill would leave."""
    import builtins
    import io

    real_open = io.open

    class HalfWriter:
        def __init__(self, handle):
            self._handle = handle

        def write(self, text):
            self._handle.write(text[: len(text) // 2])
            self._handle.flush()
            raise _Killed

        def __getattr__(self, attr):
            return getattr(self._handle, attr)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

    def fake_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if Path(str(file)).name.startswith(name) and any(m in mode for m in "wax"):
            return HalfWriter(handle)
        return handle

    monkeypatch.setattr(io, "open", fake_open)
    monkeypatch.setattr(builtins, "open", fake_open)


@pytest.mark.parametrize("log", ["metrics.jsonl", "eval.jsonl"])
def test_a_kill_while_resume_trims_a_log_keeps_the_old_log(log: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / log
    # a metrics row holds numbers only (a text value is refused as damage); an eval row names its phase
    rows = [{"step": s, "loss/total": 0.5, **({"phase": "step"} if log == "eval.jsonl" else {})} for s in range(6)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    def trim() -> None:
        if log == "metrics.jsonl":
            runlog.MetricsLog(path, resume_from_step=4).close()
        else:
            prepare_eval_log(path, resume_from_step=4)

    with monkeypatch.context() as patch:
        _die_half_way_through_writes_to(patch, log)
        with pytest.raises(_Killed):
            trim()
    assert runlog.read_metrics(path) == rows, "a kill while trimming the log lost rows"
    trim()
    assert [row["step"] for row in runlog.read_metrics(path)] == [0, 1, 2, 3]


def test_no_pickle_in_a_lora_run_directory(tmp_path: Path) -> None:
    config = TrainConfig(**{**CONFIG.to_dict(), "steps": 1, "eval_samples": 0, "lora": True, "lora_r": 2,
                            "adam_betas": (0.9, 0.99)})
    Trainer(config, tmp_path / "lora").run()
    assert (tmp_path / "lora" / "final" / "adapter_model.safetensors").is_file()
    _assert_no_pickle(tmp_path / "lora")



def test_sigterm_to_train_exits_130_in_one_line_and_the_run_resumes(tmp_path: Path) -> None:
    """A cluster's preemption sends SIGTERM: `grpolab train` stops as on Ctrl-C (was: exit 143 and no line), and
    `--resume` finishes the run from its last checkpoint."""
    run = tmp_path / "run"
    flags = ["--steps", "400", "--prompts-per-step", "2", "--eval-limit", "2", "--eval-samples", "0",
             "--no-eval-start", "--checkpoint-every", "1", "--threads", "1", "--no-progress"]
    process = subprocess.Popen([sys.executable, "-m", "grpolab", "train", "--out", str(run), *flags],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180  # a hang guard, not a speed claim
    while not list((run / "checkpoints").glob("step-*")) if (run / "checkpoints").is_dir() else True:
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()[-2000:]
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=180)
    assert process.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == ("grpolab train: interrupted; rerun with --resume and the same --out "
                                               "to continue from the last checkpoint")
    assert "Traceback" not in stderr and not (run / "summary.json").exists()
    newest = max(int(path.name.removeprefix("step-")) for path in (run / "checkpoints").glob("step-*"))
    done = subprocess.run([sys.executable, "-m", "grpolab", "train", "--out", str(run), "--resume", "--steps",
                           str(newest + 2), "--no-progress", "--threads", "1"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == newest + 2


def test_sigterm_while_the_summary_is_printed_is_one_line_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    """The signal arrives after training, while the summary is read and printed: was exit 143 and no line (the
    stop handler covered only training). A handler of the test's own stands for the default action, so a fault
    shows as a missed signal, not as the test process killed."""
    from grpolab.cli import main
    from grpolab.commands import train as train_command

    def summary_interrupted(result: object, device: str) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs here, between bytecodes

    missed: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: missed.append(signum))
    monkeypatch.setattr(train_command, "_print_summary", summary_interrupted)
    try:
        code = main(["train", "--out", str(tmp_path / "run"), "--steps", "1", "--prompts-per-step", "2",
                     "--eval-samples", "0", "--eval-limit", "2", "--no-eval-start", "--threads", "1", "--no-progress"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not missed and code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "grpolab train: interrupted; rerun with --resume and the same --out to continue from the last checkpoint")
