"""How many completions make one group of a TRL completion log, which nothing in the log states.

TRL's sampler puts a prompt's G completions next to each other, so the groups are consecutive blocks of G rows;
``trl_group_size`` infers G (from a ``sample`` column, the run's ``config.yaml``, or the advantages) and warns
where the log cannot tell one group of 8 from two adjacent groups of 4 of the same prompt;
``stated_group_size_warning`` checks a ``--group-size`` the user gave against the log. (Split from
``grpolab.audit.sources``, which finds and streams the tables.)
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from grpolab.audit.sources import _read_parquet, prompt_keys, read_schema

__all__ = ["stated_group_size_warning", "trl_group_size"]


def _runs(keys: list) -> list[int]:
    """Lengths of the runs of equal consecutive ``keys``."""
    return [len(list(run)) for _, run in itertools.groupby(keys)]


def _config_group_size(root: Path | None) -> tuple[int | None, Path | None]:
    """``group_size`` of the run's ``config.yaml`` beside the completions (in ``root`` or its parent)."""
    folders = () if root is None else (root, root.parent) if root.name == "completions" else (root,)
    for folder in folders:
        path = folder / "config.yaml"
        if path.is_file():
            import yaml

            try:
                value = (yaml.safe_load(path.read_text()) or {}).get("group_size")
            except (yaml.YAMLError, OSError, UnicodeDecodeError, AttributeError):
                return None, None
            usable = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            return (value, path) if usable else (None, None)
    return None, None


def _blocks_are_groups(advantages: list[np.ndarray], size: int) -> bool:
    """Whether every block of ``size`` rows could be one group of a centred estimator: its advantages sum to
    zero, and are all zero or none zero (binary rewards: a row at the group mean means every row is)."""
    for values in advantages:
        blocks = np.nan_to_num(values).reshape(-1, size)
        zero = np.abs(blocks) <= 1e-4
        if (zero.any(axis=1) & ~zero.all(axis=1)).any():
            return False
        if (np.abs(blocks.sum(axis=1)) > 1e-3 * np.maximum(1.0, np.abs(blocks).sum(axis=1))).any():
            return False
    return True


def _sample_group_size(samples: list[list], divisors: list[int]) -> int | None:
    """The largest of ``divisors`` whose blocks each hold sample indices 0..G-1 in order, if any."""
    if not samples or not all(isinstance(v, int) for values in samples for v in values):
        return None
    for d in divisors:
        if all(values == list(range(d)) * (len(values) // d) for values in samples):
            return d
    return None


def _prompt_runs(files: list[Path], prompt: str, step: str | None, advantage: str | None
                 ) -> tuple[int, bool, list[list], list[np.ndarray]]:
    """(the gcd of the lengths of the runs of identical consecutive (step, prompt) over ``files``, whether a file
    holds one run only, each file's ``sample`` column, each file's advantages)."""
    size, single, samples, advantages = 0, False, [], []
    for path in files:
        names = read_schema(path, "parquet").names
        wanted = [c for c in dict.fromkeys((prompt, step, advantage, "sample")) if c and c in names]
        table = _read_parquet(path, wanted)
        keys = prompt_keys(table.column(prompt).combine_chunks()).to_pylist()
        if step and step in names:
            keys = list(zip(table.column(step).to_pylist(), keys, strict=True))
        runs = _runs(keys)
        single = single or len(runs) == 1
        for run in runs:
            size = math.gcd(size, run)
        if "sample" in names and "sample" != prompt:
            samples.append(table.column("sample").to_pylist())
        if advantage and advantage in names:
            advantages.append(table.column(advantage).cast(pa.float64()).to_numpy(zero_copy_only=False))
    return max(size, 1), single, samples, advantages


def _guess(size: int, smaller: int | None, why: str) -> str:
    alternative = f"one group of {size} or {size // smaller} adjacent groups of {smaller}" if smaller else (
        "one group or several adjacent groups")
    return (f"G = {size} is a guess: {why}, and nothing in the log (no sample column, no run config.yaml, no "
            f"advantages that tell) says whether such a run is {alternative} of that prompt, which changes the "
            "groups and their degeneracy; pass --group-size (TRL's num_generations)")


def stated_group_size_warning(files: list[Path], prompt: str, group_size: int, *, step: str | None = None
                              ) -> str | None:
    """A warning when ``--group-size`` does not divide every run of one prompt's consecutive rows in a TRL log:
    its blocks would then hold rows of two prompts."""
    size = _prompt_runs(files, prompt, step, None)[0]
    if size % group_size == 0:
        return None
    return (f"--group-size {group_size} does not divide the runs of one prompt's rows in the log (their lengths' "
            f"gcd is {size}), so some of its groups hold rows of two prompts; pass TRL's num_generations")


def trl_group_size(
    files: list[Path], prompt: str, *, step: str | None = None, advantage: str | None = None,
    root: Path | None = None,
) -> tuple[int, str, str | None]:
    """(G of a TRL log, where it came from, a warning when the log cannot tell).

    Groups never cross what the log keeps apart: G divides every run of identical consecutive (step, prompt)
    in each file. Adjacent groups of one prompt form one longer run, so G comes, in order, from a ``sample``
    index column, the run's ``config.yaml`` ``group_size``, or the largest divisor of the runs' gcd whose
    blocks the ``advantage`` column shows to be groups. Where that leaves two sizes of at least 2 (no such
    evidence, or advantages that fit both, as all-zero advantages fit any size), a warning names both and
    ``--group-size``: every prompt sampled as two adjacent groups of 4 would otherwise read as groups of 8."""
    size, single, samples, advantages = _prompt_runs(files, prompt, step, advantage)
    divisors = [d for d in range(size, 0, -1) if size % d == 0]
    by_sample = _sample_group_size(samples, divisors)
    if by_sample:
        return by_sample, "the sample column", None
    configured, config_path = _config_group_size(root)
    if configured is not None and size % configured == 0:
        return configured, f"group_size in {config_path}", None
    if advantages and len(advantages) == len(files):
        fits = [d for d in divisors if _blocks_are_groups(advantages, d)]
        if fits:
            how = "the advantages" if fits[0] < size else "runs of identical prompts"
            others = [d for d in fits[1:] if d >= 2]
            return fits[0], how, _guess(fits[0], others[0], f"the advantages fit groups of {fits[0]} and of "
                                                          f"{others[0]}") if others else None
    smaller = next((d for d in divisors[1:] if d >= 2), None)
    if smaller or (single and size > 1):
        why = (f"a log file holds {size} rows of one prompt" if single else
               f"every prompt's rows come in runs of {size} (or multiples)")
        return size, "runs of identical prompts", _guess(size, smaller, why)
    return size, "runs of identical prompts", None
