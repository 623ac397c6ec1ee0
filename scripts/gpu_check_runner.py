"""The GPU check's runner: the ``Check`` (settings, working folder, clock and the steps' outcomes), which records
each step, runs the child steps' specs in fresh Python processes, and runs the steps in their phases; and
``child_main``, what such a child process runs."""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpu_check_engines import compare, resume, train
from gpu_check_processes import last_line, run_logged, tail
from gpu_check_sampling import child_sampling, sampling
from gpu_check_setup import (
    ENGINES,
    ENTRY,
    MODELS,
    Fetch,
    Step,
    StepFailed,
    child_env,
    child_names,
    kind_of,
    sizes,
    step_names,
)
from gpu_check_shapes import build_models, child_build, child_train, shape


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

    # ------------------------------------------------------------------ the child steps (4 and 5)

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
        code = run_logged([self.python, str(ENTRY), "--child", str(spec_path)], log,
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
        by_engine = [(f"{kind}-{engine}", job, engine) for kind, job in (("train", train), ("resume", resume),
                                                                            ("compare", compare))
                     for engine in ENGINES]
        if self.cpu:
            with ThreadPoolExecutor(max_workers=self.sizes.jobs) as pool:
                if children:
                    pool.submit(self.run_group, children)
                for name, job, engine in by_engine:
                    if wanted(name):
                        pool.submit(job, self, engine)
        else:
            for jobs, kind in ((1, "train"), (4, ("resume", "compare"))):
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    for name, job, engine in by_engine:
                        if wanted(name) and name.startswith(kind):
                            pool.submit(job, self, engine)
            if children:
                built = _done(build_models(self, self.fetch_one))
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
        built = _done(build_models(self, fetch))
        for name in names[1:]:
            self.dispatch(name, built, fetch)

    def dispatch(self, name: str, built: Future, fetch: Fetch) -> Step:
        if name == "sampling":
            return sampling(self, built, fetch)
        engine, model = name.split("-", 2)[1:]
        return shape(self, engine, model, built, fetch)


def raise_or_return(result: Any) -> dict[str, Any]:
    if isinstance(result, Exception):
        raise result
    return result


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


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
