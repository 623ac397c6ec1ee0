"""Fail fast when a Hugging Face hub name can be neither found locally nor downloaded.

Without this, a model or data set name that is not local waits for the hub's network time-outs and
retries (tens of seconds) before failing. ``hub_unavailable`` answers at once when ``HF_HUB_OFFLINE`` (or
``TRANSFORMERS_OFFLINE``) is set, and otherwise within ``REACH_TIMEOUT_S`` with one HTTP request to the
hub endpoint (``HF_ENDPOINT``; proxies from the environment apply); the answer is kept for the process.
``hub_cached`` says whether the hub cache already holds a repository, so that a cached name still loads
(with ``local_files_only``) while the hub is out of reach.
"""

from __future__ import annotations

import functools
import os
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["REACH_TIMEOUT_S", "hub_cached", "hub_unavailable"]

REACH_TIMEOUT_S = 3.0
"""How long the reachability check waits for the hub endpoint to answer."""


def _is_true(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


@functools.lru_cache(maxsize=8)
def _unreachable(endpoint: str) -> str | None:
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=REACH_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return None  # the hub answered, even if not with 200
    except (OSError, ValueError) as error:  # URLError, time-out, refused, bad endpoint
        reason = getattr(error, "reason", error)
        return f"{endpoint} cannot be reached ({reason})"
    return None


def hub_unavailable() -> str | None:
    """Why the hub cannot be used right now (offline mode, or no answer within ``REACH_TIMEOUT_S``), or None."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if _is_true(os.environ.get(variable)):
            return f"{variable} is set"
    return _unreachable(os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/"))


def hub_cached(repo_id: str, repo_type: str = "model") -> bool:
    """Whether the hub cache (``HF_HUB_CACHE``) holds a snapshot of ``repo_id`` (or, for data sets, the
    ``datasets`` cache holds a prepared copy)."""
    from huggingface_hub import constants

    hub_cache = Path(os.environ.get("HF_HUB_CACHE", constants.HF_HUB_CACHE))
    folder = hub_cache / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots"
    if folder.is_dir() and any(folder.iterdir()):
        return True
    if repo_type == "dataset":
        import datasets

        prepared = Path(datasets.config.HF_DATASETS_CACHE) / repo_id.replace("/", "___")
        return prepared.is_dir()
    return False
