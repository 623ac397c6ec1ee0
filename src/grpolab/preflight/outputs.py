"""The files ``grpolab preflight`` writes into its ``--out`` folder.

* ``counts.csv``: one row per train prompt: prompt_id, prompt, n, correct (and the estimated p = correct / n).
* ``band/`` and ``control/``: each a data folder usable as ``grpolab train --task file --data FOLDER
  --prompt-column prompt --reference-column answer``: ``train.jsonl`` holds the band's prompts (or the
  equal-size random control from the whole pool), ``test.jsonl`` the task's own test split, so that runs on
  either folder are scored on the same held-out prompts as runs on the task itself. Prompts are written as the
  model saw them (the task's template already applied), so the ``file`` task's default template ``{prompt}``
  reproduces them. A pre-flight whose band is empty writes neither, and removes the ones an earlier pre-flight
  left in the same ``--out`` (``remove_data_folder``), which would otherwise read as this one's.
* ``summary.json``: the result of ``grpolab preflight --json``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpolab.errors import UserError
from grpolab.io import atomic_write_text
from grpolab.tasks import Problem

__all__ = ["counts_frame", "remove_data_folder", "train_command", "write_counts", "write_data_folder"]


def counts_frame(problems: Sequence[Problem], successes: np.ndarray, n: int) -> pd.DataFrame:
    """The per-prompt table [P]: prompt_id, prompt, n, correct, p (= correct / n)."""
    return pd.DataFrame({"prompt_id": [p.id for p in problems], "prompt": [p.prompt for p in problems],
                         "n": n, "correct": np.asarray(successes, dtype=int),
                         "p": np.asarray(successes, dtype=float) / n})


def write_counts(frame: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


def _jsonl(problems: Sequence[Problem]) -> str:
    return "".join(json.dumps({"id": p.id, "prompt": p.prompt, "answer": p.reference}) + "\n" for p in problems)


def write_data_folder(folder: Path, train: Sequence[Problem], test: Sequence[Problem]) -> None:
    """``folder/train.jsonl`` and ``folder/test.jsonl`` with columns id, prompt, answer."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "train.jsonl", _jsonl(train))
    atomic_write_text(folder / "test.jsonl", _jsonl(test))


def remove_data_folder(folder: Path) -> None:
    """Remove a folder ``write_data_folder`` wrote (train.jsonl and test.jsonl, nothing else); a folder holding
    anything more is the user's, and is refused in one line rather than deleted or left to be read as current."""
    if not folder.is_dir() or folder.is_symlink():
        if folder.is_symlink() or folder.exists():
            raise UserError(f"{folder} is not a folder the pre-flight wrote, and this pre-flight's band is empty; "
                            "move it away so that it is not read as this band (the predictions are written)")
        return
    names = {entry.name for entry in folder.iterdir()}
    if not names <= {"train.jsonl", "test.jsonl"}:
        raise UserError(f"{folder} holds files the pre-flight does not write ({', '.join(sorted(names)[:3])}), "
                        "and this pre-flight's band is empty; move it away so that it is not read as this band (the "
                        "predictions are written)")
    for name in names:
        (folder / name).unlink()
    folder.rmdir()


def train_command(model: str, folder: Path, group_size: int, sampling: dict[str, Any]) -> str:
    """The ``grpolab train`` line that trains on a data folder written by ``write_data_folder``, sampling as the
    pre-flight did (``sampling``: its verifier, temperature, max_new_tokens and use_chat_template), so that the
    run sees the prompts and completions whose counts chose the folder."""
    options = json.dumps({"max_new_tokens": sampling["max_new_tokens"],
                          "use_chat_template": sampling["use_chat_template"]})
    words = ["grpolab", "train", "--model", model, "--task", "file", "--data", str(folder), "--prompt-column",
             "prompt", "--reference-column", "answer", "--verifier", sampling["verifier"], "--task-options", options,
             "--temperature", f"{sampling['temperature']:g}", "--group-size", str(group_size)]
    return shlex.join(words)
