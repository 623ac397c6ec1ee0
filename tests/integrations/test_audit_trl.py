"""grpolab audit on real TRL completion logs, checked against the rewards TRL's reward functions returned.

Each run trains a tiny random Llama on the CPU with ``GRPOConfig(log_completions=True)`` for a few steps; the
reward functions record what they return, in order, and the expected figures are computed from that record
(groups = consecutive blocks of ``num_generations`` in each call, degenerate = all total rewards equal,
which is when TRL's centred advantage is zero), never from the Parquet files the audit reads.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("trl")

from grpolab.audit import audit
from grpolab.cli import main
from grpolab.diagnostics import iid_degeneracy
from grpolab.errors import UserError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl" / "train_grpo.py"
G = 4


class Recorder:
    """Reward functions that remember every batch they scored: ``calls[i][name]`` is a list of rewards."""

    def __init__(self) -> None:
        self.calls: list[dict[str, list[float]]] = []

    def correct(self, prompts: list[str], completions: list[str], log_extra: Any = None, **_: Any) -> list[float]:
        """Prompt "A ..." always right, "B ..." always wrong, "C ..." right on odd character sums."""
        rewards = [
            {"A": 1.0, "B": 0.0}.get(prompt[0], float(sum(map(ord, completion)) % 2))
            for prompt, completion in zip(prompts, completions, strict=True)
        ]
        self.calls.append({"correct": rewards})
        if log_extra is not None:  # a numeric diagnostic column, not a reward
            log_extra("answer_len", [len(completion) for completion in completions])
        return rewards

    def fmt(self, prompts: list[str], completions: list[str], **_: Any) -> list[float]:
        """A 0/1 format reward: the completion length is a multiple of 3."""
        rewards = [float(len(completion) % 3 == 0) for completion in completions]
        self.calls[-1]["fmt"] = rewards
        return rewards

    def expected(self, steps: list[int] | None = None) -> dict[str, float]:
        """Figures of the recorded calls (call i = step i + 1), optionally only of ``steps``."""
        chosen = [call for i, call in enumerate(self.calls) if steps is None or i + 1 in steps]
        correct = np.concatenate([np.reshape(call["correct"], (-1, G)) for call in chosen])  # [groups, G]
        total = np.concatenate([np.sum([np.reshape(v, (-1, G)) for v in call.values()], axis=0) for call in chosen])
        rates = correct.mean(axis=1)
        return {
            "groups": len(correct),
            "degenerate": float(np.mean(total.min(axis=1) == total.max(axis=1))),
            "uniform": float(np.mean((rates == 0) | (rates == 1))),
            "success_rate": float(correct.mean()),
            "pooled_d_iid": iid_degeneracy(float(rates.mean()), G),
        }


def _prompts(kinds: str) -> list[str]:
    return [f"{kind} what is {i}?" for i in range(4) for kind in kinds]


def _train(
    model_dir: str, out: Path, rewards: list[Callable[..., Any]], prompts: list[str], trainer_cls: Any = None,
    **config: Any,
) -> Any:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = dict(
        output_dir=str(out), max_steps=6, per_device_train_batch_size=4 * G, num_generations=G,
        max_completion_length=6, learning_rate=1e-3, use_cpu=True, logging_steps=1, save_strategy="no",
        report_to=[], seed=0, temperature=1.5, log_completions=True, num_completions_to_print=0,
    )
    args = GRPOConfig(**{**settings, **config})
    trainer = (trainer_cls or GRPOTrainer)(
        model=model_dir, reward_funcs=rewards, args=args, train_dataset=Dataset.from_dict({"prompt": prompts})
    )
    trainer.train()
    return trainer


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Recorder, Any]]:
    """Four small TRL runs: log_extra + duplicate prompts, two rewards, one prompt per step, logging_steps=3."""
    import torch

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("grpolab_trl_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)  # type: ignore[union-attr]
    root = tmp_path_factory.mktemp("trl_logs")
    model = str(example.build_tiny_model(root / "tiny"))
    from grpolab.integrations.trl import GRPOTrainer

    out: dict[str, tuple[Path, Recorder, Any]] = {}
    plans: dict[str, tuple[Callable[[Recorder], list[Any]], list[str], dict[str, Any]]] = {
        # 3 distinct prompts, 4 per step: every step holds two dataset rows with the same text
        "extra_and_duplicates": (lambda r: [r.correct], [f"{kind} same?" for kind in "ABC"] * 4, {}),
        "two_rewards": (lambda r: [r.correct, r.fmt], _prompts("ABC"), {}),
        "one_prompt_per_step": (
            lambda r: [r.correct], _prompts("ABC"),
            {"per_device_train_batch_size": G, "max_steps": 24, "trainer_cls": GRPOTrainer},
        ),
        "logging_steps_3": (lambda r: [r.correct], _prompts("ABC"), {"logging_steps": 3}),
    }
    for name, (funcs, prompts, config) in plans.items():
        recorder = Recorder()
        trainer = _train(model, root / name, funcs(recorder), prompts, **config)
        out[name] = (root / name, recorder, trainer)
    return out


def _check(report: dict[str, Any], expected: dict[str, float]) -> None:
    assert report["groups"] == expected["groups"]
    assert report["group_size"] == G
    for key in ("degenerate", "uniform", "success_rate"):
        assert report[key] == pytest.approx(expected[key], abs=1e-12), key


def test_log_extra_column_is_not_a_reward(runs: dict) -> None:
    path, recorder, _ = runs["extra_and_duplicates"]
    report = audit(path)
    assert report["input"]["columns"]["reward"] == "correct"
    assert report["input"]["columns"]["not_read"] == ["answer_len"]
    _check(report, recorder.expected())
    curve = report["pass_at_k"]
    assert curve["1"] == pytest.approx(recorder.expected()["success_rate"]) and curve["4"] < 1.0


def test_duplicate_prompts_stay_separate_groups(runs: dict) -> None:
    import pandas as pd

    path, recorder, _ = runs["extra_and_duplicates"]
    steps_with_duplicates = 0
    for file in sorted((path / "completions").glob("*.parquet")):
        prompts = pd.read_parquet(file)["prompt"].tolist()[::G]  # one per group
        steps_with_duplicates += len(set(prompts)) < len(prompts)
    assert steps_with_duplicates > 0, "no step drew both copies of a prompt: the test proves nothing"
    report = audit(path)
    assert report["groups"] == 24 and report["group_sizes"] == {str(G): 24}
    _check(report, recorder.expected())


def test_two_reward_functions_refuse_then_use_the_named_column(runs: dict, capsys: pytest.CaptureFixture) -> None:
    path, recorder, _ = runs["two_rewards"]
    with pytest.raises(UserError, match=r"several 0/1 columns .*\(correct, fmt\).*--reward-column"):
        audit(path)
    assert main(["audit", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    report = audit(path, reward_column="correct")
    expected = recorder.expected()
    _check(report, expected)
    assert report["degenerate"] != report["uniform"], "format reward should break some uniform groups"
    assert report["zero_gradient_completions"] >= report["degenerate"]


def test_one_prompt_per_step_d_iid_is_pooled(runs: dict) -> None:
    path, recorder, trainer = runs["one_prompt_per_step"]
    report = audit(path)
    expected = recorder.expected()
    _check(report, expected)
    assert report["steps"] == 24 and report["groups"] == 24
    assert report["d_iid"] == pytest.approx(expected["pooled_d_iid"], abs=1e-12)
    assert report["jensen_gap"] > 0
    # the adapter's own metric: after 24 groups its window holds the whole run
    logged = [entry for entry in trainer.state.log_history if "starvation/d_iid" in entry]
    assert logged[-1]["starvation/window_groups"] == 24
    assert logged[-1]["starvation/d_iid"] == pytest.approx(expected["pooled_d_iid"], abs=1e-6)


def test_logging_steps_warning_and_partial_figures(runs: dict, capsys: pytest.CaptureFixture) -> None:
    path, recorder, _ = runs["logging_steps_3"]
    report = audit(path)
    assert report["input"]["logged_steps"] == [3, 6]
    _check(report, recorder.expected(steps=[3, 6]))
    assert len(report["warnings"]) == 1 and "logging_steps" in report["warnings"][0]
    assert main(["audit", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert "logging_steps" in captured.err and json.loads(captured.out)["groups"] == 8


def test_text_output_names_the_columns(runs: dict, capsys: pytest.CaptureFixture) -> None:
    path, _, _ = runs["extra_and_duplicates"]
    assert main(["audit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "correctness column" in out and "correct" in out and "answer_len" in out and "advantage" in out


def test_corrupt_file_and_non_binary_rewards(runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import shutil

    import pandas as pd

    source, _, _ = runs["extra_and_duplicates"]
    copy = tmp_path / "run"
    shutil.copytree(source / "completions", copy / "completions")
    (copy / "completions" / "completions_00009.parquet").write_bytes(b"PAR1 torn write")
    assert main(["audit", str(copy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "completions_00009.parquet: not a readable Parquet file" in err
    (copy / "completions" / "completions_00009.parquet").unlink()
    first = copy / "completions" / "completions_00001.parquet"
    frame = pd.read_parquet(first)
    frame["correct"] = frame["correct"] * 0.5  # rewards 0 / 0.5: not binary
    frame.to_parquet(first)
    with pytest.raises(UserError, match=r"values other than 0 and 1.*--threshold"):
        audit(copy, reward_column="correct")
    report = audit(copy, reward_column="correct", threshold=0.25)
    assert any("not 0 or 1" in warning for warning in report["warnings"])
