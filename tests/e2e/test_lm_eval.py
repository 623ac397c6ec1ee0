"""lm-eval end to end on the embedded model: a one-step run sampled by lm-eval's command line through the grpolab
backend (``python -m grpolab.integrations.lm_eval``) on a task ``grpolab lm-eval-tasks`` wrote, its samples file
re-scored by ``grpolab eval --from-samples``; and lm-eval's ``hf`` backend on the run's export, greedy, against the
grpolab backend on the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.cli import main
from grpolab.config import TrainConfig
from grpolab.evaluation import evaluate
from grpolab.export import export
from grpolab.integrations.lm_eval import GenerationSettings, write_task
from grpolab.models import load_policy
from grpolab.tasks import get_task
from grpolab.train.trainer import Trainer
from grpolab.verifiers import get_verifier

DOCUMENTS, REPEATS = 8, 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-step LoRA run of the embedded model."""
    out = tmp_path_factory.mktemp("lm-eval") / "run"
    Trainer(TrainConfig(lora=True, lora_r=4, lora_alpha=8, steps=1, prompts_per_step=4, group_size=2, eval_limit=4,
                        eval_samples=0, progress=False, threads=1, lr=3e-3), out).run()
    return out


@pytest.fixture()
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _samples_file(out: Path) -> Path:
    files = list(out.rglob("samples_grpolab_reverse_*.jsonl"))
    assert len(files) == 1, files
    return files[0]


def test_lm_evals_samples_rescore_to_grpolabs_own_evaluation(run_dir: Path, tmp_path: Path, offline, capsys) -> None:
    task = get_task("reverse")
    write_task(task, tmp_path / "tasks", GenerationSettings(REPEATS, 1.0, task.max_new_tokens), limit=DOCUMENTS)
    command = [sys.executable, "-m", "grpolab.integrations.lm_eval", "--model", "grpolab", "--model_args",
               f"pretrained={run_dir},seed=0", "--device", "cpu", "--include_path", str(tmp_path / "tasks"),
               "--tasks", "grpolab_reverse", "--log_samples", "--output_path", str(tmp_path / "out")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **offline},
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in _samples_file(tmp_path / "out").read_text().splitlines()]
    assert len(lines) == DOCUMENTS and all(len(line["resps"][0]) == REPEATS for line in lines)

    assert main(["eval", "--from-samples", str(tmp_path / "out"), "--json"]) == 0
    (scored,) = json.loads(capsys.readouterr().out)["tasks"]
    assert (scored["prompts"], scored["n"], scored["responses_scored"]) == (DOCUMENTS, REPEATS, DOCUMENTS * REPEATS)
    exact = get_verifier("exact")
    by_hand = sum(exact(r, line["target"]) for line in lines for r in line["resps"][0]) / (DOCUMENTS * REPEATS)
    assert scored["metrics"]["avg@n"] == pytest.approx(by_hand)
    # the backend draws what `grpolab eval --seed 0 --n 4` draws, so every sampled metric agrees
    own = evaluate(load_policy(str(run_dir)), task, n=REPEATS, limit=DOCUMENTS, seed=0).sampled
    assert scored["metrics"] == pytest.approx(own["metrics"])


def test_lm_evals_hf_backend_on_the_export_matches_the_grpolab_backend_greedily(run_dir: Path, tmp_path: Path,
                                                                               offline) -> None:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from grpolab.integrations.lm_eval.backend import register

    register()
    export(run_dir, tmp_path / "model")
    write_task(get_task("reverse"), tmp_path / "tasks", GenerationSettings(1, 0.0, 7), limit=DOCUMENTS)

    def responses(model: str, pretrained: Path) -> list[str]:
        results = simple_evaluate(model=model, model_args={"pretrained": str(pretrained)}, tasks=["grpolab_reverse"],
                                  task_manager=TaskManager(include_path=str(tmp_path / "tasks")), device="cpu",
                                  log_samples=True)
        return [sample["resps"][0][0] for sample in results["samples"]["grpolab_reverse"]]

    hf = responses("hf", tmp_path / "model")
    assert len(hf) == DOCUMENTS and all(hf) and hf == responses("grpolab", run_dir)
