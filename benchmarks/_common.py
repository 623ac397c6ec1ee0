"""Shared pieces of the benchmark suite: the model under test, timing, peak memory, result rows, tables.

Every benchmark returns a list of result rows (``row(...)``): a ratio measured side by side in one
process (medians of interleaved repeats, so that the noise of a shared machine hits both sides alike)
or an absolute value with a goal. ``met`` is None for informational rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STANDIN_DIR = Path(tempfile.gettempdir()) / "grpolab-bench-standin"
Row = dict[str, Any]


# ---------------------------------------------------------------------------- the model under test


def embedded_available() -> bool:
    """Whether the embedded default model (``grpolab/assets/embedded``) is installed."""
    from grpolab.models import embedded_model_dir

    return (embedded_model_dir() / "config.json").is_file()


def default_model() -> tuple[str, bool]:
    """(model name for ``load_policy``, is it the real embedded model).

    Until the embedded model exists, a stand-in with its architecture and tokenizer (random weights,
    built by ``scripts/make_embedded_model.py``'s own ``build_tokenizer`` / ``build_model``) is used.
    Random weights rarely emit EOS, so stand-in rollouts run to the token budget: a worst case.
    """
    if embedded_available():
        return "embedded", True
    if not (STANDIN_DIR / "config.json").is_file():
        _build_standin(STANDIN_DIR)
    return str(STANDIN_DIR), False


def _build_standin(out: Path) -> None:
    import torch

    spec = importlib.util.spec_from_file_location("make_embedded_model", REPO / "scripts" / "make_embedded_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    tokenizer = module.build_tokenizer()
    torch.manual_seed(0)
    args = argparse.Namespace(hidden=128, layers=3, heads=4)
    model = module.build_model(tokenizer, args)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def model_label(is_embedded: bool) -> str:
    return "embedded" if is_embedded else "stand-in (random embedded-shaped Llama)"


# ---------------------------------------------------------------------------- timing and memory


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one call on ``clock`` (wall time; ``time.process_time``: this process's CPU time, which a
    shared machine's other jobs disturb less)."""
    started = clock()
    fn()
    return clock() - started


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Call every function ``warmup`` times, then ``repeats`` rounds of one call each (A B C A B C ...), timed
    on ``clock``."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn, clock))
    return times


def rss_bytes(pid: int | None = None) -> int:
    """Current resident set size of a process (default: this one)."""
    import psutil

    return psutil.Process(pid).memory_info().rss


def _tree_rss(pid: int) -> list[int]:
    """RSS of a process and each of its descendants (empty once it is gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    sizes = []
    for proc in procs:
        try:
            sizes.append(proc.memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    return sizes


def tree_rss_bytes(pid: int) -> int:
    """Sum of the RSS of a process and all its descendants (0 once it is gone)."""
    return sum(_tree_rss(pid))


def largest_rss_bytes(pid: int) -> int:
    """The largest RSS of one process in the tree (0 once it is gone)."""
    return max(_tree_rss(pid), default=0)


class PeakSampler:
    """Polls ``measure()`` in a background thread; ``peak`` is the largest value seen."""

    def __init__(self, measure: Callable[[], int], interval: float = 0.005):
        self.measure, self.interval = measure, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.measure())
            time.sleep(self.interval)

    def __enter__(self) -> PeakSampler:
        self.peak = self.measure()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.measure())


@contextmanager
def peak_rss() -> Iterator[PeakSampler]:
    """Peak RSS of this process while the block runs (``sampler.peak``, bytes)."""
    with PeakSampler(rss_bytes) as sampler:
        yield sampler


def one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def mib(value: float) -> float:
    return value / 2**20


# ---------------------------------------------------------------------------- result rows and tables


def row(name: str, *, unit: str, goal: str, met: bool | None, ratio: float | None = None,
        value: float | None = None, detail: str = "", **extra: Any) -> Row:
    """One result: ``ratio`` (side by side, dimensionless) or ``value`` (absolute), its goal and verdict."""
    out: Row = {"name": name, "unit": unit, "goal": goal, "met": met, "detail": detail}
    if ratio is not None:
        out["ratio"] = round(float(ratio), 4)
    if value is not None:
        out["value"] = round(float(value), 4)
    return {**out, **extra}


def _shown(result: Row) -> str:
    number = result.get("ratio", result.get("value"))
    return "-" if number is None else f"{number:.3g}"


def _verdict(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "info"}[met]


def format_table(results: list[Row]) -> str:
    """A fixed-width text table: name, number, unit, goal, met, detail."""
    header = ("benchmark", "result", "unit", "goal", "met", "detail")
    lines = [(r["name"], _shown(r), r["unit"], r["goal"], _verdict(r["met"]), r.get("detail", "")) for r in results]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines, strict=True)]
    widths[-1] = 0  # the detail column is not padded
    render = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    top = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()
    return "\n".join([top, "-" * len(top), *render])


def markdown_table(results: list[Row]) -> str:
    lines = ["| benchmark | result | unit | goal | met | detail |", "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['name']} | {_shown(r)} | {r['unit']} | {r['goal']} | {_verdict(r['met'])} | "
                     f"{r.get('detail', '')} |")
    return "\n".join(lines)


def bench_main(run: Callable[[bool], list[Row]], argv: list[str] | None = None) -> int:
    """The ``__main__`` of a benchmark module: ``--quick``, ``--json``; prints its table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="reduced version")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    results = run(args.quick)
    print(json.dumps(results, indent=1) if args.json else format_table(results))
    return 0


@contextmanager
def fast_decode_settings(settings: dict[str, Any]) -> Iterator[None]:
    """``grpolab.engine.fast_decode``'s module settings (``step_mode``, ``kv_cache``, ``stream``, ``bucket_slots``)
    set for the block, and put back after it."""
    from grpolab.engine import fast_decode

    before = {name: getattr(fast_decode, name) for name in settings}
    try:
        for name, value in settings.items():
            setattr(fast_decode, name, value)
        yield
    finally:
        for name, value in before.items():
            setattr(fast_decode, name, value)


def print_and_save(text: str, result: dict[str, Any], out: Path | None) -> None:
    """The ``__main__`` end of a benchmark with its own table (``bench_gpu.py``, ``bench_decode_kernels.py``):
    print ``text``; with ``out``, write ``result`` there as JSON."""
    print(text, flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import platform

    import torch

    return {"nproc": os.cpu_count(), "torch": torch.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "load_avg_1min": round(os.getloadavg()[0], 2)}
