"""A sweep's data and local model are part of its identity, and so of its start-evaluation cache.

``OUT/identity.json`` holds ``grpolab.train.identity.run_identity`` of the sweep's base settings (a content hash
of a local ``--data`` file or folder and a fingerprint of a local ``--model`` directory) and ``splits``, the hash of
the task's splits as the runs see them (``grpolab.tasks.base.splits_hash``: it also covers data read from the hub
cache). Once a run of the sweep has trained a step, a re-run on changed data (or a changed model directory) is
refused in one line, as a run's ``--resume`` is; before that, the new identity replaces the old one. So is a re-run
whose ``identity.json`` is missing or damaged once a run has trained (in a folder that held the sweep's
``compare.yaml`` before the command: a sweep saves it, then its identity, before any run trains): what the runs
trained on is then unknown, and recording today's data as theirs would let changed data into the comparison.

The start evaluations the runs of one seed share (``OUT/start-evals/KEY.json``, keyed by the trainer on the
"start" settings only) were made under the identity ``OUT/identity.json`` held: when it differs from the sweep's
now, or was never recorded, the cached entries are deleted with one warning and evaluated again, so a start is
never read from other data (the probe's report showed a "42.9% -> 0.0%" collapse from a start evaluated on an
older file).

Data edited while a sweep runs: each run records the identity of the data it loaded in its own ``task.json``
(``"identity"``), and after each group of runs the sweep compares it with its ``identity.json``
(``refuse_runs_on_other_data``): a run that trained on other data is refused in one line naming it (3 runs on the
old file and 1 on the new one were gathered as one comparison, exit 0).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.train.identity import run_identity

if TYPE_CHECKING:
    from grpolab.sweep.plan import RunSpec

__all__ = ["IDENTITY_FILE", "START_EVALS", "START_EVAL_ENTRY", "check_sweep_identity", "refuse_runs_on_other_data"]

IDENTITY_FILE = "identity.json"
START_EVALS = "start-evals"
# the name of a cached start evaluation: ``grpolab.train.lifecycle.start_evaluation_key`` (20 hex digits); any other
# file in the folder is the user's
START_EVAL_ENTRY = "[0-9a-f]" * 20 + ".json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()) else None


def _refuse_unknown(path: Path, out: Path) -> None:
    """Refuse a trained sweep whose recorded identity is gone or unreadable: nothing says what its runs trained on."""
    state = "is damaged" if path.exists() or path.is_symlink() else "is missing"
    raise UserError(f"{path} {state}, so grpolab cannot tell whether the data or model changed since the runs in "
                    f"{out} trained (a resume could mix two versions in one comparison); restore {path} from a copy, "
                    "or choose a new --out")


def _trained(out: Path) -> bool:
    """Whether any run of the sweep in ``out`` has logged a training step."""
    return any(log.stat().st_size for log in Path(out).glob("*/*/metrics.jsonl"))


def check_sweep_identity(out: Path, base: TrainConfig, splits: str | None = None, *, recorded: bool = False
                         ) -> dict[str, str]:
    """Refuse a sweep in ``out`` whose data or local model changed since its runs trained (``splits``: the hash of
    the task's splits, ``Task.summary()["data_sha256"]``), or whose identity is missing or damaged when it was
    ``recorded`` (the folder was a sweep's before this command); record the identity, and clear start evaluations
    cached under another one. Returns the identity."""
    out = Path(out)
    identity = {**run_identity(base), **({"splits": splits} if splits else {})}
    path = out / IDENTITY_FILE
    saved = _read(path)
    if saved is None and recorded and _trained(out):
        _refuse_unknown(path, out)
    changed = [key for key in ("data", "model", "splits") if saved and key in saved and saved[key] != identity.get(key)]
    if changed and _trained(out):
        named = {"data": f"the data {base.data or base.task_options.get('path')}",
                 "model": f"the model directory {base.model}",
                 "splits": f"the problems of task {base.task!r} (its data, or the grpolab that builds them)"}
        changed = [key for key in changed if key != "splits"] or changed  # name the file when it is the cause
        raise UserError(f"{' and '.join(named[key] for key in changed)} changed since the runs in {out} trained "
                        f"(recorded in {path}), so a resume would mix two versions in one comparison; restore "
                        "what the runs trained on, or choose a new --out")
    _clear_stale_start_evaluations(out / START_EVALS, saved, identity)
    atomic_write_text(path, json.dumps(identity))  # the identity the runs (and their start cache) are made under
    return identity


def _clear_stale_start_evaluations(cache: Path, saved: dict[str, Any] | None, identity: dict[str, str]) -> None:
    """Delete the cached start evaluations when they were made under another identity (``saved``, None when it
    was never recorded) than the sweep's now."""
    entries = sorted(cache.glob(START_EVAL_ENTRY)) if cache.is_dir() else []
    if entries and saved != identity:
        for entry in entries:
            entry.unlink()
        warnings.warn(f"{cache} held {len(entries)} start evaluation(s) made on other data or another model "
                      "(or before grpolab recorded which); deleted them, so each start is evaluated again",
                      UserWarning, stacklevel=3)


def _run_data(run_dir: Path) -> str | None:
    """The data identity a run recorded in its ``task.json`` when it loaded its task (None: not recorded)."""
    try:
        task = json.loads((run_dir / "task.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    recorded = task.get("identity") if isinstance(task, dict) else None
    return recorded.get("data") if isinstance(recorded, dict) else None


def refuse_runs_on_other_data(specs: Sequence[RunSpec], identity: dict[str, str], base: TrainConfig,
                              out: Path) -> None:
    """Refuse, in one line naming them, the runs among ``specs`` whose ``task.json`` records other data than the
    sweep's ``identity`` (``check_sweep_identity``): the data was edited while the sweep ran. Runs whose settings
    name another data path (a ``--vary`` of it) are not compared."""
    data = identity.get("data")
    if not data:
        return
    path = (base.data, base.task_options.get("path"))
    other = [spec.run_id for spec in specs if (spec.config.data, spec.config.task_options.get("path")) == path
             and _run_data(spec.run_dir) not in (None, data)]
    if other:
        named = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
        raise UserError(f"the data {base.data or base.task_options.get('path')} changed while the sweep in {out} ran: "
                        f"run(s) {named} trained on other data than the sweep's (each run's task.json against "
                        f"{out / IDENTITY_FILE}); restore the data and move those runs out of {out}, then rerun, or "
                        "choose a new --out")
