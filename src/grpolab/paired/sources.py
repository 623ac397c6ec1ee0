"""Paired pass@k comparisons of two evaluations of the same prompts, or of two arms of a ``grpolab compare``
sweep: where the per-prompt counts come from, how the two sides are matched, and the result as data.

The statistics are ``grpolab.paired.band`` (paired prompt bootstrap with a sup-t band over k; the
seed-level t interval with Holm over k). This module only gathers the counts:

* ``side_from_samples``: one lm-eval or lighteval samples file, re-scored (``grpolab.harness_samples``);
* ``side_from_run``: a run directory's end evaluation in ``eval.jsonl`` (per-prompt ``successes`` and
  ``problem_ids``, no sampling again), or a JSON file written by ``grpolab eval --out`` (how an exported folder's
  evaluation is kept);
* ``pair_sides``: the two sides matched by prompt id; prompts that differ are refused, naming the first;
* ``arm_pairs``: two arms of a sweep's ``results.parquet`` at each (variant, G): the prompt-level band on the
  arms' samples pooled per prompt over their common seeds, and the seed-level interval over those seeds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpolab.errors import UserError
from grpolab.paired.band import paired_band, per_prompt_pass_at_k, seed_differences

__all__ = ["Side", "arm_pairs", "compare_sides", "pair_sides", "side_from_run", "side_from_samples"]


@dataclass
class Side:
    """One evaluation: a label, each prompt's id [P], samples n [P] and correct c [P], and its references
    (None where the source holds none)."""

    label: str
    ids: list[str]
    n: np.ndarray
    c: np.ndarray
    references: list[str] | None = None


def side_from_samples(path: str, verifier: str | None) -> Side:
    """The re-scored counts of one harness samples file."""
    from grpolab.harness_samples import find_sample_files, read_samples, rescore

    files = find_sample_files([path])
    if len(files) != 1:
        raise UserError(f"{path}: a paired comparison takes one samples file per side, found {len(files)}; name one")
    score = rescore(read_samples(files[0]), verifier)
    return Side(str(files[0]), list(score.samples.doc_ids), score.n, score.correct, list(score.samples.references))


def _end_row(rows: list[dict[str, Any]], where: str) -> dict[str, Any]:
    ends = [row for row in rows if row.get("phase") == "end"]
    if not ends:
        raise UserError(f"{where}: no end evaluation; a paired comparison reads the run's end evaluation")
    return ends[-1]


def side_from_run(path: str) -> Side:
    """The per-prompt counts of a run's end evaluation, or of a ``grpolab eval --out`` JSON file."""
    location = Path(path)
    if location.is_dir():
        if not (location / "eval.jsonl").is_file():
            raise UserError(f"{path}: no eval.jsonl; --against compares run directories or JSON files written by "
                            "grpolab eval --out (evaluate an exported folder with --out first)")
        from grpolab.train.runlog import read_evaluations

        row = _end_row(read_evaluations(location), f"run {path}")
    elif location.is_file():
        try:
            row = json.loads(location.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise UserError(f"{path}: not a JSON file written by grpolab eval --out ({error})") from None
    else:
        raise UserError(f"{path}: no such run directory or file")
    successes, ids, n = row.get("successes") or [], row.get("problem_ids") or [], int(row.get("n") or 0)
    if not successes or n < 1 or len(ids) != len(successes):
        raise UserError(f"{path}: its evaluation holds no per-prompt successes of n >= 1 samples with their prompt "
                        "ids; evaluate with --n N (grpolab eval ... --n 16 --out FILE) first")
    return Side(path, [str(i) for i in ids], np.full(len(successes), n), np.asarray(successes, dtype=np.int64))


def _first_difference(a: Side, b: Side) -> str | None:
    missing_b = next((i for i in a.ids if i not in set(b.ids)), None)
    if missing_b is not None:
        return f"prompt {missing_b} of {a.label} is not in {b.label}"
    missing_a = next((i for i in b.ids if i not in set(a.ids)), None)
    return None if missing_a is None else f"prompt {missing_a} of {b.label} is not in {a.label}"


def pair_sides(a: Side, b: Side) -> tuple[Side, list[str]]:
    """B reordered to A's prompts, and notes (the prompts whose n differ). Refuses sides of other prompts."""
    if len(set(a.ids)) != len(a.ids) or len(set(b.ids)) != len(b.ids):
        raise UserError("a prompt id repeats on one side; a paired comparison needs each prompt once per side")
    difference = _first_difference(a, b)
    if difference:
        raise UserError(f"the two sides hold different prompts: {difference} ({len(a.ids)} vs {len(b.ids)} "
                        "prompts); a paired comparison needs the same prompts on both")
    order = [b.ids.index(i) for i in a.ids]
    references = None if b.references is None else [b.references[j] for j in order]
    if a.references is not None and references is not None:
        wrong = next((i for i, x, y in zip(a.ids, a.references, references, strict=True) if x != y), None)
        if wrong is not None:
            raise UserError(f"prompt {wrong} has another reference answer in {b.label} than in {a.label}; the two "
                            "sides are not the same documents")
    aligned = Side(b.label, list(a.ids), b.n[order], b.c[order], references)
    differ = int(np.sum(a.n != aligned.n))
    notes = [f"n differs on {differ} of {len(a.ids)} prompts ({a.label}: {_span(a.n)}, {b.label}: "
             f"{_span(aligned.n)}); pass@k is compared for k up to the smallest, {int(min(a.n.min(), aligned.n.min()))}"
             ] if differ else []
    return aligned, notes


def _span(n: np.ndarray) -> str:
    return f"n = {int(n.min())}" if n.min() == n.max() else f"n = {int(n.min())} to {int(n.max())}"


def compare_sides(a: Side, b: Side, *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The prompt-level comparison of two evaluations, JSON-ready."""
    aligned, notes = pair_sides(a, b)
    band = paired_band(a.n, a.c, aligned.n, aligned.c, resamples=resamples, seed=seed)
    return {"a": a.label, "b": b.label, "notes": notes, "prompt_level": band.to_dict()}


def _end_runs(results: pd.DataFrame) -> pd.DataFrame:
    """The end evaluation of every run that did not diverge, estimators labelled ``name+variant``."""
    from grpolab.report.tables import labelled, variants

    status = results["status"].fillna("finished") if "status" in results.columns else "finished"
    rows = results[(results["phase"] == "end") & (status != "diverged")].sort_values("step")
    rows = rows.groupby("run_id").tail(1)
    return labelled(rows.assign(variant=variants(rows)))


def _counts(runs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-run counts [S, P] and samples [S] of one arm's runs (rows in seed order)."""
    successes = [np.asarray(list(s), dtype=np.int64) for s in runs["successes"]]
    if not successes or len({s.size for s in successes}) != 1 or successes[0].size < 2:
        raise UserError("the runs' end evaluations hold no per-prompt successes of one test set")
    return np.stack(successes), runs["n"].to_numpy(dtype=np.int64)


def _arm_pair(a_runs: pd.DataFrame, b_runs: pd.DataFrame, resamples: int, seed: int) -> dict[str, Any]:
    seeds = sorted(set(a_runs["seed"]) & set(b_runs["seed"]))
    a_runs = a_runs.set_index("seed").loc[seeds].reset_index()
    b_runs = b_runs.set_index("seed").loc[seeds].reset_index()
    (c_a, n_a), (c_b, n_b) = _counts(a_runs), _counts(b_runs)
    if c_a.shape[1] != c_b.shape[1]:
        raise UserError(f"the arms were evaluated on different test sets ({c_a.shape[1]} vs {c_b.shape[1]} prompts)")
    pooled = paired_band(np.full(c_a.shape[1], n_a.sum()), c_a.sum(axis=0), np.full(c_b.shape[1], n_b.sum()),
                         c_b.sum(axis=0), resamples=resamples, seed=seed)
    result: dict[str, Any] = {"seeds": [int(s) for s in seeds], "n": int(min(n_a.min(), n_b.min())),
                              "prompt_level": pooled.to_dict(), "seed_level": None}
    if len(seeds) >= 2:
        ks = list(range(1, result["n"] + 1))
        curves = [np.stack([per_prompt_pass_at_k(np.full(c.shape[1], n_s), row, ks).mean(axis=0)
                            for row, n_s in zip(c, n, strict=True)]) for c, n in ((c_a, n_a), (c_b, n_b))]
        result["seed_level"] = seed_differences(curves[0], curves[1], result["seeds"]).to_dict()
        result["curves_a"], result["curves_b"] = (c.tolist() for c in curves)
    return result


def arm_pairs(results: pd.DataFrame, arm_a: str, arm_b: str, *, resamples: int = 2000, seed: int = 0
              ) -> list[dict[str, Any]]:
    """arm_a against arm_b (estimators as labelled in the report) at every (variant, G) where both have runs
    with per-prompt successes and a common seed."""
    runs = _end_runs(results)
    runs = runs[runs["n"].fillna(0) > 0]
    names = sorted(set(runs["estimator"]))
    for arm in (arm_a, arm_b):
        if arm not in names:
            raise UserError(f"no finished run of arm {arm!r} with sampled evaluations; the arms: {', '.join(names)}")
    pairs = []
    for size, group in runs.groupby("group_size"):
        a_runs, b_runs = (group[group["estimator"] == arm].sort_values("seed") for arm in (arm_a, arm_b))
        if a_runs.empty or b_runs.empty or not set(a_runs["seed"]) & set(b_runs["seed"]):
            continue
        pairs.append({"arm_a": arm_a, "arm_b": arm_b, "group_size": int(size),
                      **_arm_pair(a_runs, b_runs, resamples, seed)})
    if not pairs:
        raise UserError(f"arms {arm_a} and {arm_b} share no group size and seed; nothing to pair")
    return pairs
