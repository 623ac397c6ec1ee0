"""``engine: trl`` end to end on the CPU: the run directory a grpolab run writes, read by audit and the model
loader; the prompts grpolab's engine would draw; a diverged step; kill -9 and --resume; two processes under
``accelerate launch``; and ``grpolab compare --engine trl`` reduced (2 steps, 1 seed, a tiny evaluation).

Runs are tiny (the embedded model, 2-4 prompts of G = 2, 2-6 steps) so that the whole file stays near a minute
or two on two shared cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

pytest.importorskip("trl")

from grpolab.config import TrainConfig
from grpolab.train.runlog import ROLLOUT_SCHEMA, read_metrics

GRPOLAB = Path(sys.executable).with_name("grpolab")
TINY = dict(engine="trl", steps=2, prompts_per_step=2, group_size=2, eval_limit=4, eval_samples=2, max_new_tokens=12,
            checkpoint_every=1, progress=False, threads=1, lr=1e-3)
FLAGS = ["--engine", "trl", "--prompts-per-step", "2", "--group-size", "2", "--eval-limit", "4", "--eval-samples", "2",
         "--max-new-tokens", "12", "--no-progress", "--threads", "1"]


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONPATH": src}


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    from grpolab.train import train

    run_dir = tmp_path_factory.mktemp("trl") / "run"
    steps: list[int] = []
    result = train(TrainConfig(**TINY), run_dir, on_step=lambda step, metrics: steps.append(step))
    assert steps == [1, 2]
    return run_dir, result


def test_the_run_directory_is_a_grpolab_run_directory(trl_run: tuple[Path, Any]) -> None:
    run_dir, result = trl_run
    assert (run_dir / "config.yaml").read_text().count("engine: trl") == 1
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for key in ("rollout/reward_mean", "rollout/completions_generated", "starvation/degenerate", "starvation/d_iid",
                "loss/total", "loss/grad_norm", "perf/step_time", "perf/rollout_time", "trl/reward"):
        assert all(key in row for row in rows), key
    assert [row["rollout/completions_generated"] for row in rows] == [4.0, 8.0]
    for row in rows:  # each step's rollout table holds every completion of the step, scored as logged
        table = pq.read_table(run_dir / "rollouts" / f"step-{row['step']:06d}.parquet")
        assert table.schema.equals(ROLLOUT_SCHEMA)
        frame = table.to_pandas()
        assert len(frame) == 4 and frame["sample"].tolist() == [0, 1, 0, 1]
        assert frame.groupby("prompt_id").size().tolist() == [2, 2]
        assert frame["reward"].mean() == pytest.approx(row["rollout/reward_mean"])
        assert frame["reward"].mean() == pytest.approx(row["trl/reward"])  # TRL's own figure agrees
        assert (frame["length"] > 0).all() and frame["completion"].str.len().sum() > 0
    evaluations = read_metrics(run_dir / "eval.jsonl")
    assert [(e["step"], e["phase"]) for e in evaluations] == [(0, "start"), (2, "end")]
    assert evaluations[1]["completions_generated"] == 8 and set(evaluations[1]["pass_at_k"]) == {"1", "2"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["final_metrics"] == result.final_metrics
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_it_records_the_compute_trl_reports_and_marks_the_rest_unrecorded(trl_run: tuple[Path, Any]) -> None:
    run_dir, _ = trl_run
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [(r["compute/optimizer_steps"], r["compute/optimizer_steps_total"]) for r in rows] == [(1, 1), (1, 2)]
    for row in rows:  # the step's completion tokens: the rollout table's lengths
        lengths = pq.read_table(run_dir / "rollouts" / f"step-{row['step']:06d}.parquet").column("length").to_pylist()
        assert row["compute/sampled_tokens"] == sum(lengths)
        assert not any(key.startswith(("compute/trained", "compute/forward")) for key in row)
    compute = json.loads((run_dir / "summary.json").read_text())["compute"]
    assert (compute["optimizer_steps"], compute["sampled_completions"]) == (2, 8)
    unrecorded = ["trained_sequences", "trained_tokens", "forward_tokens", "sampled_tokens"]
    assert [compute[name] for name in unrecorded] == [None] * 4
    assert sorted(compute["unavailable"]) == sorted(unrecorded) and all(compute["unavailable"].values())


def test_audit_and_the_model_loader_read_it(trl_run: tuple[Path, Any]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpolab.audit import audit
    from grpolab.models import load_policy

    run_dir, _ = trl_run
    report = audit(run_dir)
    assert report["input"]["kind"] == "grpolab" and report["groups"] == 4 and report["group_size"] == 2
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert report["uniform"] == pytest.approx(sum(r["starvation/uniform"] for r in rows) / 2)
    policy = load_policy(str(run_dir))
    AutoModelForCausalLM.from_pretrained(run_dir / "final")  # transformers loads final/ as it is
    assert AutoTokenizer.from_pretrained(run_dir / "final").vocab_size == policy.tokenizer.vocab_size


@pytest.mark.parametrize("chat", [False, True])
def test_the_dataset_holds_every_steps_prompts_in_step_order(chat: bool) -> None:
    from grpolab.train.lifecycle import load_task_for
    from grpolab.train.shell import step_problems
    from grpolab.train.trl_engine.run import _dataset

    for task_name in ("reverse", "arith"):
        config = TrainConfig(task=task_name, steps=4, prompts_per_step=3, seed=5)
        task = load_task_for(config)
        expected = [p for step in range(1, 5) for p in step_problems(task, config, step)]
        rows = list(_dataset(task, config, chat))
        assert [r["prompt_id"] for r in rows] == [p.id for p in expected]
        assert [r["reference"] for r in rows] == [p.reference for p in expected]
        assert [r["prompt"] for r in rows] == [[{"role": "user", "content": p.prompt}] if chat else p.prompt
                                               for p in expected]


def test_the_dataset_of_a_huge_run_is_built_at_once() -> None:
    """Issue 36: every step's prompts were built before step 1 (72 s and 3 GB for 300,000 steps; 1e14 never
    started). The stream draws a step's prompts when TRL reads them."""
    import itertools
    import tracemalloc

    from datasets import IterableDataset

    from grpolab.train.lifecycle import load_task_for
    from grpolab.train.shell import step_problems
    from grpolab.train.trl_engine.run import _dataset

    config = TrainConfig(task="reverse", steps=10**14, prompts_per_step=4, seed=3)
    task = load_task_for(config)
    _dataset(task, TrainConfig(task="reverse", steps=1), False)  # datasets' first-use set-up is not timed
    tracemalloc.start()
    started = time.perf_counter()
    dataset = _dataset(task, config, False)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(dataset, IterableDataset)
    assert elapsed < 1.0 and peak < 10 * 2**20, (elapsed, peak)
    first = [r["prompt_id"] for r in itertools.islice(dataset, 8)]
    assert first == [p.id for step in (1, 2) for p in step_problems(task, config, step)]


def test_a_non_finite_loss_stops_the_run_without_saving(tmp_path: Path) -> None:
    from transformers import TrainerControl

    from grpolab.train.runlog import MetricsLog
    from grpolab.train.shell import RunShell
    from grpolab.train.trl_engine.recorder import RunRecorder

    shell = RunShell(TrainConfig(steps=5), tmp_path, command="test")
    shell.metrics_log = MetricsLog(tmp_path / "metrics.jsonl")
    recorder = RunRecorder(iterations=1, steps=5, shell=shell, evaluate=lambda step: None, on_step=None)
    control = TrainerControl(should_save=True)
    recorder.on_log(None, SimpleNamespace(global_step=3), control, logs={"loss": float("nan"), "grad_norm": 1.0})
    shell.release()
    assert recorder.diverged == (3, "the loss is nan")
    assert control.should_training_stop and not control.should_save
    assert read_metrics(tmp_path / "metrics.jsonl") == []


def _wait_for_checkpoint(checkpoints: Path, least: int, process: subprocess.Popen, timeout: float = 240) -> None:
    """Wait until a sealed TRL checkpoint of at least ``least`` steps exists (older ones are rotated away)."""
    deadline = time.monotonic() + timeout

    def done() -> bool:
        states = checkpoints.glob("checkpoint-*/checksums.json")  # sealed: TRL's save and grpolab's seal done
        return any(int(p.parent.name.split("-")[1]) >= least for p in states)

    while not done():
        assert process.poll() is None, process.stderr.read() if process.stderr else "the run ended early"
        assert time.monotonic() < deadline, f"no checkpoint of {least} steps appeared in {checkpoints}"
        time.sleep(0.05)


def test_kill_9_then_resume_completes_the_run_with_its_saved_settings(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """The run killed is a real ``grpolab train`` process; the resumes run ``grpolab.cli.main`` in this process:
    what they check is the run directory the kill left, not a process of their own."""
    from grpolab.cli import main

    out = tmp_path / "run"
    command = [str(GRPOLAB), "train", "--out", str(out), "--steps", "10", "--checkpoint-every", "1",
               "--keep-checkpoints", "1", "--seed", "3", "--no-eval-start", *FLAGS]
    process = subprocess.Popen(command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_checkpoint(out / "checkpoints", 2, process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert not (out / "summary.json").exists()
    assert main(["train", "--out", str(out), "--resume"]) == 0, capsys.readouterr().err[-3000:]
    assert [row["step"] for row in read_metrics(out / "metrics.jsonl")] == list(range(1, 11))
    assert sorted(p.name for p in (out / "rollouts").glob("*.parquet")) == [f"step-{s:06d}.parquet" for s in
                                                                            range(1, 11)]
    assert [e["phase"] for e in read_metrics(out / "eval.jsonl")] == ["end"]
    resumes = [json.loads(line) for line in (out / "resumes.jsonl").read_text().splitlines()]
    assert len(resumes) == 1 and resumes[0]["from_step"] >= 2 and resumes[0]["changed"] == {}
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume"]) == 0, capsys.readouterr().err[-3000:]  # nothing to do
    assert [e["phase"] for e in read_metrics(out / "eval.jsonl")] == ["end"]
    assert [row["step"] for row in read_metrics(out / "metrics.jsonl")] == list(range(1, 11))
    capsys.readouterr()
    code = main(["train", "--out", str(out), "--resume", "--lr", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "lr" in err, err


def test_two_processes_write_one_run_directory_with_every_group(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(GRPOLAB), "train",
               "--out", str(out), "--steps", "2", *FLAGS, "--prompts-per-step", "4"]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(out / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]  # one writer: each step once
    assert [row["starvation/groups"] for row in rows] == [4.0, 4.0]  # both processes' groups
    for row in rows:
        frame = pd.read_parquet(out / "rollouts" / f"step-{row['step']:06d}.parquet")
        assert len(frame) == 8 and frame.groupby("prompt_id").size().tolist() == [2] * 4
        assert frame["reward"].mean() == pytest.approx(row["rollout/reward_mean"])
    assert [e["phase"] for e in read_metrics(out / "eval.jsonl")] == ["start", "end"]
    assert (out / "final" / "model.safetensors").is_file()


def test_compare_with_engine_trl_reduced(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    command = [str(GRPOLAB), "compare", "--engine", "trl", "--estimators", "sign,dr_grpo", "--group-sizes", "2",
               "--seeds", "1", "--steps", "2", "--prompts-per-step", "2", "--eval-limit", "4", "--eval-samples", "2",
               "--max-new-tokens", "12", "--workers", "2", "--lr", "1e-3", "--out", str(out)]
    result = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    results = pd.read_parquet(out / "results.parquet")
    assert set(results["estimator"]) == {"sign", "dr_grpo"} and set(results["phase"]) == {"start", "end"}
    for run in (out / "runs").iterdir():
        assert "engine: trl" in (run / "config.yaml").read_text()
        assert any((run / "checkpoints").glob("checkpoint-*"))
    assert (out / "report.md").is_file()


def test_a_diverged_trl_run_keeps_its_last_good_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grpolab.train import train
    from grpolab.train.divergence import RunDiverged
    from grpolab.train.trl_engine import recorder

    original, calls = recorder.non_finite_metric, []

    def second_step_loss_is_nan(metrics: dict) -> str | None:  # step 2's loss comes back non-finite
        calls.append(1)
        return original({**metrics, "loss/total": float("nan")}) if len(calls) >= 2 else None

    monkeypatch.setattr(recorder, "non_finite_metric", second_step_loss_is_nan)
    with pytest.raises(RunDiverged, match=r"^the run diverged at step 2: the loss is nan") as error:
        train(TrainConfig(**{**TINY, "eval_start": False}), tmp_path / "run")
    assert error.value.step == 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["diverged_at_step"], summary["reason"]) == ("diverged", 2, "the loss is nan")
    assert not (tmp_path / "run" / "final").exists()
    assert [p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint-*")] == ["checkpoint-1"]
    assert [row["step"] for row in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1]


@pytest.mark.parametrize(("changes", "logged"), [
    ({"policy_loss": "vespo", "entropy_coef": 0.01, "off_policy_mask_threshold": 0.5, "top_entropy_quantile": 0.5,
      "num_iterations": 2}, "trl/vespo/phi_seq_mean"),
    ({"policy_loss": "sapo", "loss_aggregation": "seq_mean_token_mean"}, "trl/entropy"),
    ({"policy_loss": "luspo", "loss_aggregation": "seq_mean_token_mean"}, "trl/clip_ratio/region_mean"),
])
def test_trls_own_losses_train_through_the_engine(tmp_path: Path, changes: dict, logged: str) -> None:
    """TRL 1.16's sapo, luspo, vespo and its entropy options reach GRPOTrainer and train (the mapping:
    test_trl_mapping.py); TRL logs the loss's own figure and, under the entropy bonus, its coefficient."""
    from grpolab.train import train

    train(TrainConfig(**{**TINY, "checkpoint_every": 0, **changes}), tmp_path / "run")
    rows = [row for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss/total" in row]
    assert [row["step"] for row in rows] == [1, 2] and all(logged in row for row in rows)
    assert all(row.get("trl/entropy_coef") == pytest.approx(0.01) for row in rows) == ("entropy_coef" in changes)


def test_trls_adaptive_entropy_moves_its_coefficient(tmp_path: Path) -> None:
    """--entropy-target above the embedded model's entropy: TRL raises the coefficient by --entropy-coef-delta
    at each optimiser step (Skywork-OR1's adaptive control)."""
    from grpolab.train import train

    train(TrainConfig(**{**TINY, "checkpoint_every": 0, "entropy_coef": 0.01, "entropy_target": 50.0,
                         "entropy_coef_delta": 0.02}), tmp_path / "run")
    rows = [row for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss/total" in row]
    assert [row["trl/entropy_coef"] for row in rows] == pytest.approx([0.03, 0.05])


def test_a_resumed_run_keeps_its_success_window(tmp_path: Path) -> None:
    """Was: the TRL engine's checkpoints held no success window, so a resumed run's d_iid, window_groups and
    jensen_gap at step 3 saw step 3 alone, where the undisturbed run saw steps 1 to 3."""
    from grpolab.train import train

    settings = {**TINY, "steps": 3, "eval_samples": 0, "eval_start": False, "advantage": "dr_grpo"}
    train(TrainConfig(**settings), tmp_path / "whole")
    train(TrainConfig(**{**settings, "steps": 2}), tmp_path / "resumed")
    train(TrainConfig(**settings), tmp_path / "resumed", resume=True)
    keys = ("starvation/window_groups", "starvation/d_iid", "starvation/jensen_gap")
    whole, resumed = (read_metrics(tmp_path / name / "metrics.jsonl")[-1] for name in ("whole", "resumed"))
    assert whole["step"] == resumed["step"] == 3 and whole["starvation/window_groups"] == 6
    assert [resumed[k] for k in keys] == pytest.approx([whole[k] for k in keys])
