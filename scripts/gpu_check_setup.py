"""The GPU check's set-up: its constants, its sizes (the GPU's or the CPU mode's tiny ones), the names of its
steps, the record of one step's outcome, and the environment its child processes run in."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENTRY = Path(__file__).resolve().with_name("gpu_check.py")
"""The command the child processes run (``--child``)."""
ENGINES = ("grpolab", "trl")
MODELS = ("smollm2-135m-shape", "qwen2.5-0.5b-shape")


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How big each step is: the GPU check's sizes or the CPU mode's tiny ones."""

    train: list[str]
    learn_points: float | None
    compare: list[str]
    resume_steps: int
    resume: list[str]
    shape: dict[str, Any]
    sampling: dict[str, int]
    timeouts: dict[str, float]
    budget_s: float
    jobs: int


def sizes(cpu: bool) -> Sizes:
    """The GPU check's sizes, or (``cpu``) the tiny CPU mode's."""
    if cpu:
        return Sizes(
            train=["--steps", "2", "--group-size", "4", "--prompts-per-step", "4", "--lr", "1e-3",
                   "--eval-limit", "8", "--eval-samples", "2"],
            learn_points=None,
            compare=["--steps", "2", "--prompts-per-step", "4", "--eval-limit", "8", "--eval-samples", "0",
                     "--workers", "1", "--no-report"],
            resume_steps=12,
            resume=["--group-size", "2", "--prompts-per-step", "4", "--checkpoint-every", "2", "--eval-limit", "8",
                    "--eval-samples", "0"],
            shape={"steps": 2, "group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "eval_limit": 2,
                   "eval_samples": 1, "eval_start": False, "dtype": "float32"},
            sampling={"prompts": 4, "samples": 2, "max_new_tokens": 8},
            timeouts={"train": 60, "compare": 90, "resume": 90, "build": 60, "shape": 90, "sampling": 60,
                      "group": 200},
            budget_s=240, jobs=3)
    return Sizes(
        train=["--steps", "20", "--group-size", "8", "--prompts-per-step", "16", "--lr", "1e-3",
               "--eval-limit", "200", "--eval-samples", "4"],
        learn_points=30.0,
        compare=["--steps", "8", "--prompts-per-step", "16", "--eval-limit", "64", "--eval-samples", "4"],
        resume_steps=30,
        resume=["--group-size", "4", "--prompts-per-step", "16", "--checkpoint-every", "5", "--eval-limit", "50",
                "--eval-samples", "0"],
        shape={"steps": 3, "group_size": 8, "prompts_per_step": 16, "max_new_tokens": 128, "eval_limit": 8,
               "eval_samples": 2, "eval_start": False, "dtype": "bfloat16"},
        sampling={"prompts": 64, "samples": 4, "max_new_tokens": 128},
        timeouts={"train": 90, "compare": 120, "resume": 120, "build": 90, "shape": 150, "sampling": 120,
                  "group": 600},
        budget_s=440, jobs=1)


@dataclasses.dataclass
class Step:
    """One step's outcome: ``status`` is pass or fail; ``metrics`` feeds the tables."""

    name: str
    status: str = "fail"
    seconds: float = 0.0
    detail: str = ""
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)


class StepFailed(Exception):
    """A step's check did not hold; the message is its one-line reason."""


Fetch = Callable[[str], dict[str, Any]]
"""A child step's result by its name (raises the child's ``StepFailed``)."""


def child_env(cpu: bool) -> dict[str, str]:
    """The children's environment: this repository's ``src`` first, offline, unbuffered; on the CPU no GPU and one
    thread each (several steps run at once)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")]))
    env.update({"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1",
                "TOKENIZERS_PARALLELISM": "false"})
    if cpu:
        env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return env


def kind_of(name: str) -> str:
    """The timeout kind of a step: train, compare, resume, build, shape or sampling."""
    return name.split("-")[0]


def child_names() -> list[str]:
    """The steps that run in child processes, build-models first."""
    return ["build-models", "sampling", *shape_names()]


def step_names() -> list[str]:
    """Every step, in the order the tables list them."""
    names = [f"{kind}-{engine}" for kind in ("train", "compare", "resume") for engine in ENGINES]
    return [*names, "build-models", *shape_names(), "sampling"]


def shape_names() -> list[str]:
    return [f"shape-{engine}-{model}" for model in MODELS for engine in ENGINES]
