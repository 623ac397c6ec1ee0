"""Logs a run writes as it goes: ``metrics.jsonl`` (one JSON object per step, flushed and fsynced) and
``rollouts/step-NNNNNN.parquet`` (every completion of a step, written to a temporary file and renamed,
so only complete Parquet files ever exist). No log is written through a symbolic link (``grpolab.io``).
On resume from step s, entries of steps >= s are dropped (the file is rewritten atomically) so that the logs
have each step exactly once. A log damaged anywhere but its last line is refused with one line naming the file
and line.

Metrics also go to the backends of ``report_to`` (TRL's convention, ``report_backends``): TensorBoard event
files under ``<run>/tensorboard``, a W&B run under ``<run>/wandb`` (offline, so with no account or network,
unless ``WANDB_API_KEY`` or ``WANDB_MODE`` says otherwise; ``wandb sync`` uploads it later), a Trackio
project ``grpolab`` in Trackio's own store (``TRACKIO_DIR``). A backend whose package is missing is
refused before the run starts, in one line naming the ``pip install``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from grpolab.config.checks import REPORT_BACKENDS, report_backends
from grpolab.errors import UserError
from grpolab.io import link_error, naming, number_after, open_no_follow
from grpolab.metric_keys import upgrade_row

__all__ = ["MetricsLog", "RolloutLog", "evaluation_key", "missing_steps", "open_backends", "read_evaluations",
           "read_metrics", "read_summary", "report_backends", "rewrite_jsonl", "trl_report_to", "without_successes"]

ROLLOUT_SCHEMA = pa.schema(
    [
        ("step", pa.int32()),
        ("prompt_id", pa.string()),
        ("sample", pa.int16()),
        ("completion", pa.string()),
        ("reward", pa.float32()),
        ("advantage", pa.float32()),
        ("length", pa.int32()),
        ("truncated", pa.bool_()),
    ]
)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Appends one JSON line per step to ``path``; optionally mirrors scalars to the ``backends`` (writers
    from ``open_backends``), and with ``tensorboard_dir`` (the older form) to TensorBoard."""

    def __init__(self, path: Path, *, resume_from_step: int | None = None, tensorboard_dir: Path | None = None,
                 backends: Sequence[Any] = ()):
        self.path = path
        if resume_from_step is not None and path.exists():
            rewrite_jsonl(path, [row for row in read_metrics(path) if row.get("step", -1) < resume_from_step])
        elif resume_from_step is None and path.exists():
            path.unlink()
        self._handle = open_no_follow(path, "a")
        self._writers = [*backends, *([_TensorBoard(tensorboard_dir)] if tensorboard_dir else [])]

    def write(self, step: int, metrics: dict[str, Any], *, sync: bool = True) -> None:
        """Append the row of ``step``, flushed; fsynced too unless ``sync`` is False (then ``sync()`` later)."""
        row = {"step": step, **{k: _json_safe(v) for k, v in metrics.items()}}
        with naming(self.path):
            self._handle.write(json.dumps(row) + "\n")
            self._handle.flush()
            if sync:
                os.fsync(self._handle.fileno())
        scalars = {key: value for key, value in metrics.items()
                   if isinstance(value, int | float) and not isinstance(value, bool)}
        for writer in self._writers:
            writer.log(step, scalars)

    def sync(self) -> None:
        """Make every row written so far durable (fsync)."""
        with naming(self.path):
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        with naming(self.path):
            self._handle.close()
        for writer in self._writers:
            writer.close()


# ---------------------------------------------------------------------------- report_to backends

_PACKAGES = {name: name for name in REPORT_BACKENDS}  # backend -> the package to pip install


def trl_report_to(config: Any) -> list[str]:
    """``report_to`` for a ``GRPOConfig`` of one's own (``grpolab.integrations.trl``): the backends of
    ``report_backends``, or ``["none"]``. The TRL engine does not pass it to TRL: its metrics go to grpolab's
    own backends (``open_backends``), with the same names, steps and files as the grpolab engine."""
    return report_backends(config) or ["none"]


def open_backends(config: Any, run_dir: Path, *, resume: bool) -> list[Any]:
    """A writer per backend of ``config`` (``report_backends``), each writing under ``run_dir``; a missing
    package is a ``UserError`` naming its ``pip install``, raised before any writer opens."""
    names = report_backends(config)
    for name in names:
        _require(name)
    makers = {"tensorboard": lambda: _TensorBoard(run_dir / "tensorboard"),
              "wandb": lambda: _WandB(run_dir, config.to_dict(), resume=resume),
              "trackio": lambda: _Trackio(run_dir, config.to_dict(), resume=resume)}
    return [makers[name]() for name in names]


def _require(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec(_PACKAGES[name]) is None:
        raise UserError(f"report_to {name} needs the {_PACKAGES[name]} package: pip install {_PACKAGES[name]} "
                        f"(or drop {name} from --report-to)")


def _run_id(run_dir: Path) -> str:
    """A stable id for the run directory, so that a resumed run continues the same W&B / Trackio run."""
    return "grpolab-" + hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12]


class _TensorBoard:
    """Scalars as TensorBoard event files in ``directory``."""

    def __init__(self, directory: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise UserError("report_to tensorboard (--tensorboard) needs the tensorboard package: "
                            f"pip install tensorboard ({error})") from None
        self._writer = SummaryWriter(str(directory))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


def wandb_mode() -> str:
    """``WANDB_MODE`` when set; else online with ``WANDB_API_KEY`` and offline without (no account, no network)."""
    return os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")


class _WandB:
    """A W&B run with its files under ``<run>/wandb`` (offline unless ``wandb_mode`` says online)."""

    def __init__(self, run_dir: Path, config: dict[str, Any], *, resume: bool):
        import wandb

        self._run = wandb.init(dir=str(run_dir), project=os.environ.get("WANDB_PROJECT", "grpolab"),
                               name=run_dir.name, id=_run_id(run_dir), config=config, mode=wandb_mode(),
                               resume="allow")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self._run.log(scalars, step=step)

    def close(self) -> None:
        self._run.finish()


class _Trackio:
    """A Trackio run named after the run directory, in project ``TRACKIO_PROJECT`` or grpolab, kept in
    Trackio's own store (``TRACKIO_DIR``, read once per process, so runs of one sweep worker share it)."""

    def __init__(self, run_dir: Path, config: dict[str, Any], *, resume: bool):
        import trackio

        self._trackio = trackio
        trackio.init(project=os.environ.get("TRACKIO_PROJECT", "grpolab"), name=run_dir.name, config=config,
                     resume="allow")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self._trackio.log(scalars, step=step)

    def close(self) -> None:
        self._trackio.finish()


def rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace ``path`` by ``rows`` atomically: a kill or a full disk mid-write leaves the old file whole. Neither
    ``path`` nor its staging file is written through a symbolic link (``grpolab.io.link_error``)."""
    if path.is_symlink():
        raise link_error(path)
    staging = path.with_name(path.name + ".tmp")
    staging.unlink(missing_ok=True)  # a file (or link) a kill left; "x" below creates a new file, never a link's target
    with staging.open("x") as handle:
        handle.write("".join(json.dumps(row) + "\n" for row in rows))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All complete JSON lines of a metrics file (a torn last line from a kill is skipped); ``UserError``
    naming the file and line when any other line is not a JSON object with a ``step``."""
    if not path.exists():
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{path} cannot be read ({error}); {_DAMAGED_FIX}") from None
    shapes = _EVAL_SHAPES if path.name == "eval.jsonl" else {}
    rows = []
    for number, line in enumerate(lines, start=1):
        row, problem = _row(line, shapes)
        if problem == _TORN and number == len(lines):  # torn by a kill mid-write
            continue
        if row is None:
            raise UserError(f"{path} is damaged at line {number} ({problem}); {_DAMAGED_FIX}")
        rows.append(upgrade_row(row))  # keys renamed since the row was written, under today's names
    return rows


_DAMAGED_FIX = ("move it aside and resume the run (grpolab train --resume) to log again from its last checkpoint "
                "(an ended run's evaluations come back from its summary.json)")


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``summary.json`` (present once the run ended), or None when absent or unreadable."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # ValueError: not JSON, not UTF-8, an integer of 4,300 digits
        return None
    return summary if isinstance(summary, dict) else None


def evaluation_key(row: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What names one evaluation of a run: (step, phase, split)."""
    return row.get("step"), row.get("phase"), row.get("split")


def without_successes(rows: Sequence[dict[str, Any]]) -> str:
    """" (N of them without per-prompt successes: ...)" for the evaluations restored from a ``summary.json``
    written before summaries kept them, or "" when every one has them."""
    bare = [row for row in rows if row.get("n") and not row.get("successes")]
    if not bare:
        return ""
    named = ", ".join(f"{row.get('phase')} at step {row.get('step')}" for row in bare)
    return f" ({len(bare)} of them without per-prompt successes, which that summary predates: {named})"


def read_evaluations(run_dir: Path) -> list[dict[str, Any]]:
    """The run's evaluations: ``eval.jsonl`` cross-checked against ``summary.json``. An ended run's summary
    holds every evaluation it made (with the per-prompt ``successes`` since summaries keep them); rows that the
    log lost (a torn line, a truncated or damaged file) are restored from it, with a one-line warning naming the
    file and any restored row without successes. A damaged log with no summary to restore from is a
    ``UserError`` naming it (``read_metrics``)."""
    path = run_dir / "eval.jsonl"
    saved = (read_summary(run_dir) or {}).get("evaluations")
    saved = [row for row in saved if isinstance(row, dict) and isinstance(row.get("step"), int)] \
        if isinstance(saved, list) else []
    damage = ""
    try:
        rows = read_metrics(path)
    except UserError as error:
        if not saved:
            raise
        rows, damage = [], f" ({str(error).split(';')[0]})"
    logged = {evaluation_key(row) for row in rows}
    lost = [row for row in saved if evaluation_key(row) not in logged]
    if lost:
        import warnings

        named = ", ".join(f"{row.get('phase')} at step {row['step']}" for row in lost)
        warnings.warn(f"{path} lacks {len(lost)} evaluation(s) that {run_dir / 'summary.json'} holds ({named})"
                      f"{damage}; read them from summary.json{without_successes(lost)}", UserWarning, stacklevel=2)
        rows = sorted(rows + lost, key=lambda row: (row["step"], _PHASE_ORDER.get(row.get("phase"), 1)))
    return rows


_PHASE_ORDER = {"start": 0, "step": 1, "end": 2}


def missing_steps(steps: Sequence[int], upto: int) -> list[int]:
    """The steps 1..``upto`` absent from ``steps``."""
    present = set(steps)
    return [step for step in range(1, upto + 1) if step not in present]


def spans(steps: Sequence[int]) -> str:
    """``[1, 2, 3, 6]`` as ``"1-3, 6"``."""
    parts: list[str] = []
    for step in steps:
        if parts and step == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{step}"
        else:
            parts.append(str(step))
    return ", ".join(parts)


# eval.jsonl keys that hold something other than a number (every other value of a log row is a number or null)
_EVAL_SHAPES: dict[str, type] = {"phase": str, "split": str, "pass_at_k": dict, "successes": list,
                                 "problem_ids": list, "families": list, "sampled": dict, "votes": list}
_TORN = "not a JSON object with a step"


def _row(line: str, shapes: dict[str, type]) -> tuple[dict[str, Any] | None, str]:
    """(the row of one log line, "") or (None, what is wrong with it): not JSON (``_TORN``), JSON that Python will
    not read (nested too deeply, an integer past 4,300 digits), no integer ``step``, or a value of the wrong type
    (a number where ``shapes`` names no other type)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None, _TORN
    except RecursionError:
        return None, "JSON nested too deeply to read"
    except ValueError:  # int("9" * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        return None, "an integer of more than 4300 digits"
    if not isinstance(row, dict) or not _is_step(row.get("step")):
        return None, "not a JSON object with a step"
    for key, value in row.items():
        wanted = shapes.get(key)
        if key != "step" and not (isinstance(value, wanted) if wanted else _is_number(value) or value is None):
            return None, f"its {key!r} is {_kind(value)}, not {'a ' + wanted.__name__ if wanted else 'a number'}"
    return row, ""


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


class RolloutLog:
    """Writes each step's completions to ``directory/step-NNNNNN.parquet`` atomically."""

    def __init__(self, directory: Path, *, resume_from_step: int | None = None):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        for path in directory.glob("step-*.parquet*"):  # only the files a run writes
            step = _step_of(path)
            if step is not None and (resume_from_step is None or step >= resume_from_step):
                path.unlink()

    def write(self, step: int, rows: dict[str, list[Any]]) -> Path:
        table = pa.table(rows, schema=ROLLOUT_SCHEMA)
        final = self.directory / f"step-{step:06d}.parquet"
        if final.is_symlink():
            raise link_error(final)
        staging = final.with_suffix(".parquet.tmp")
        staging.unlink(missing_ok=True)  # what a kill left (or a planted link): the write below makes a new file
        with naming(final):
            pq.write_table(table, staging)
            os.replace(staging, final)
        return final


def _step_of(path: Path) -> int | None:
    return number_after("step-", path.name.split(".")[0])
