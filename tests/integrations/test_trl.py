"""grpolab.integrations.trl: the TRL canary (grpo == TRL's own advantages), sign, metrics, the example.

Everything runs on the CPU with a tiny random Llama and a character tokenizer built in a tmp dir.
The two-process canary runs this file's ``run_canary`` under ``torchrun --nproc_per_node 2`` (gloo).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("trl")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "trl" / "train_grpo.py"


def _example_module() -> Any:
    spec = importlib.util.spec_from_file_location("grpolab_trl_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def mixed_reward(prompts: list[str], completions: list[str], **_: Any) -> list[float | None]:
    """All-correct groups (prompt A), all-wrong groups (B), mixed groups (C) and unscorable ones (D)."""
    rewards: list[float | None] = []
    for prompt, completion in zip(prompts, completions, strict=True):
        parity = float(sum(map(ord, completion)) % 2)
        kind = prompt[0]
        rewards.append({"A": 1.0, "B": 0.0, "C": parity}.get(kind, None if parity else 1.0))
    return rewards


def _dataset(kinds: str) -> Any:
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [f"{k} what is {i}?" for i in range(4) for k in kinds]})


def _trainer(model_dir: str, out_dir: str, advantage: str, kinds: str = "ABCD", **config: Any) -> Any:
    from trl import GRPOConfig

    from grpolab.integrations.trl import GRPOTrainer

    settings = dict(
        output_dir=out_dir,
        max_steps=2,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
        learning_rate=1e-3,
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        temperature=1.5,
    )
    args = GRPOConfig(**{**settings, **config})
    return GRPOTrainer(
        model=model_dir,
        reward_funcs=mixed_reward,
        args=args,
        train_dataset=_dataset(kinds),
        advantage=advantage,
    )


def run_canary(model_dir: str, out_dir: str) -> list[tuple[list[float], list[float]]]:
    """Train 2 steps with advantage="grpo"; return (TRL's, grpolab's) local advantages per generation."""
    import trl

    pairs: list[tuple[list[float], list[float]]] = []
    original = trl.GRPOTrainer._generate_and_score_completions

    def recording(self: Any, inputs: Any) -> Any:
        output = original(self, inputs)
        pairs.append((output["advantages"].tolist(), []))
        return output

    trl.GRPOTrainer._generate_and_score_completions = recording
    try:
        trainer = _trainer(model_dir, out_dir, "grpo")
        ours = type(trainer)._generate_and_score_completions

        def capture(self: Any, inputs: Any) -> Any:
            output = ours(self, inputs)
            pairs[-1][1].extend(output["advantages"].tolist())
            return output

        trainer._generate_and_score_completions = capture.__get__(trainer)
        trainer.train()
    finally:
        trl.GRPOTrainer._generate_and_score_completions = original
    return pairs


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(_example_module().build_tiny_model(tmp_path_factory.mktemp("tiny")))


def _assert_canary(pairs: list[tuple[list[float], list[float]]]) -> None:
    assert pairs, "no generation batch was recorded"
    for trl_advantages, grpolab_advantages in pairs:
        assert len(trl_advantages) == len(grpolab_advantages) > 0
        torch.testing.assert_close(torch.tensor(grpolab_advantages), torch.tensor(trl_advantages))
    assert any(abs(a) > 0.1 for trl_adv, _ in pairs for a in trl_adv), "canary saw only zero advantages"


def test_canary_grpo_matches_trl_one_process(tiny_model: str, tmp_path: Path) -> None:
    _assert_canary(run_canary(tiny_model, str(tmp_path)))


def test_canary_grpo_matches_trl_two_processes(tiny_model: str, tmp_path: Path) -> None:
    script = tmp_path / "canary.py"
    script.write_text(
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_trl import run_canary\n"
        f"pairs = run_canary({tiny_model!r}, {str(tmp_path / 'out')!r})\n"
        f"path = os.path.join({str(tmp_path)!r}, 'rank' + os.environ['RANK'] + '.json')\n"
        "open(path, 'w').write(json.dumps(pairs))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for pairs in ranks:
        _assert_canary([(t, g) for t, g in pairs])
    assert ranks[0] != ranks[1], "both ranks got the same slice"


def test_sign_gives_plus_minus_one_and_logs_starvation(tiny_model: str, tmp_path: Path) -> None:
    # only all-correct (A) and all-wrong (B) groups: every group starves a group-centred estimator
    trainer = _trainer(
        tiny_model, str(tmp_path), "sign", kinds="AB", per_device_train_batch_size=16, log_completions=True
    )
    trainer.train()
    logged = list(trainer._logs["advantages"])
    rewards = trainer._logs["rewards"]["mixed_reward"]
    assert len(logged) == len(rewards) == 16
    assert all(a == 2 * r - 1 for a, r in zip(logged, rewards, strict=True))
    assert set(logged) <= {-1.0, 1.0}
    entries = [e for e in trainer.state.log_history if "starvation/degenerate" in e]
    assert len(entries) == 2
    from grpolab.diagnostics import STARVATION_KEYS

    assert {f"starvation/{key}" for key in STARVATION_KEYS} <= set(entries[-1])
    # every group is all right or all wrong (uniform), yet sign leaves no advantage at zero (not degenerate)
    assert all(e["starvation/uniform"] == 1.0 and e["starvation/degenerate"] == 0.0 for e in entries)
    from grpolab.audit import audit  # TRL's own completion logs, audited

    report = audit(tmp_path)
    assert report["input"]["kind"] == "trl" and report["uniform"] == 1.0 and report["degenerate"] == 0.0
    assert report["zero_gradient_completions"] == 0.0 and report["sign_used_completions"] == 1.0


def test_opo_gets_the_gathered_completion_lengths(tiny_model: str, tmp_path: Path) -> None:
    from grpolab.advantages import compute_advantages

    trainer = _trainer(tiny_model, str(tmp_path), "opo", max_steps=1)
    trainer.train()  # without the lengths the registry refuses opo, and this raises
    groups = trainer.last_groups
    assert groups is not None and groups.lengths.shape == groups.rewards.shape == (2, 4)
    expected = compute_advantages("opo", groups.rewards.double(), lengths=groups.lengths)
    torch.testing.assert_close(groups.advantages.double(), expected, rtol=1e-6, atol=1e-6)


def test_opo_gets_the_lengths_as_generated_under_mask_truncated_completions(tiny_model: str, tmp_path: Path) -> None:
    """TRL zeroes a truncated completion's completion_mask under mask_truncated_completions; lengths read from it
    were 0, so opo's length-weighted baseline (and the token counts) were wrong. A 6-token budget at temperature
    1.5 on a random model truncates most completions."""
    runs = {}
    for masked in (False, True):
        trainer = _trainer(tiny_model, str(tmp_path / str(masked)), "opo", max_steps=1,
                           mask_truncated_completions=masked)
        trainer.train()
        runs[masked] = trainer.last_groups
    assert (runs[False].lengths == 6).any(), "no completion was truncated"
    torch.testing.assert_close(runs[True].lengths, runs[False].lengths)  # the same seed samples the same tokens
    assert (runs[True].lengths > 0).all()


def test_a_scale_rewards_that_contradicts_grpo_is_refused(tiny_model: str, tmp_path: Path) -> None:
    """Was: scale_rewards="none" with the default advantage gave std-scaled grpo advantages without a word."""
    for scale in ("none", "batch"):
        with pytest.raises(ValueError, match=rf"scale_rewards='{scale}' does not apply.*advantage='dr_grpo'"):
            _trainer(tiny_model, str(tmp_path), "grpo", scale_rewards=scale, max_steps=1)
    assert _trainer(tiny_model, str(tmp_path), "dr_grpo", scale_rewards="none", max_steps=1).advantage_name == "dr_grpo"


def test_resolve_advantage_names_and_callables() -> None:
    from grpolab.integrations.trl import resolve_advantage

    name, fn = resolve_advantage("sign")
    assert name == "sign"
    assert fn(torch.tensor([[1.0, 1.0]])).tolist() == [[1.0, 1.0]]

    def halved(rewards: torch.Tensor) -> torch.Tensor:
        return rewards / 2

    assert resolve_advantage(halved) == ("halved", halved)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        resolve_advantage("nope")


def test_group_rewards_weights_and_unscorable() -> None:
    from grpolab.integrations.trl import group_rewards

    per_func = torch.tensor([[1.0, 0.0], [float("nan"), 1.0], [float("nan"), float("nan")], [0.0, 0.0]])
    grouped = group_rewards(per_func, torch.tensor([1.0, 2.0]), num_generations=2)
    assert grouped.shape == (2, 2)
    assert grouped[0].tolist() == [1.0, 2.0]
    assert torch.isnan(grouped[1, 0]) and grouped[1, 1] == 0.0


def test_example_script_runs_on_cpu(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(EXAMPLE),
        "--tiny-model",
        str(tmp_path / "tiny"),
        "--cpu",
        "--max-steps",
        "1",
        "--num-prompts",
        "8",
        "--num-generations",
        "4",
        "--per-device-batch-size",
        "8",
        "--max-completion-length",
        "4",
        "--output-dir",
        str(tmp_path / "out"),
        "--advantage",
        "sign",
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["advantage"] == "sign" and "starvation/degenerate" in summary
