"""The ``file`` task: any prompt/answer table, scored by any verifier.

``grpolab train --task file --data PATH --prompt-column COL --reference-column COL --verifier NAME`` reads
a JSONL, CSV or Parquet file, a folder of ``train`` / ``test`` (and optionally ``validation``) files, a
``datasets`` folder saved with ``save_to_disk`` or a ``datasets`` hub id (see ``_tables``). Each row gives
one problem: its prompt is ``template`` with ``{prompt}`` replaced by the prompt cell, its reference is the
reference cell (numbers become text, a whole float without its ".0": pandas and Parquet store an
integer column with missing cells as floats, and an exact-match verifier would find "18" unequal to "18.0").

Splits: the data's own ``train`` and ``test`` when it has both (other splits except ``validation`` are
ignored); otherwise its single split is cut by a hash of each prompt seeded with ``seed``, about
``test_fraction`` of the prompts going to test. The cut is the same for every training seed, so every run
of a comparison is evaluated on the same problems. A ``validation`` split in the data becomes the task's
validation split; without one, ``tasks.with_validation`` carves one from train when it is needed.

Rows are left out, counted, and warned about (``TaskDataWarning``) when the prompt is empty, when the
prompt repeats one already kept (a test prompt wins over validation, validation over train, so the splits
never share a prompt), or when the verifier cannot score the reference: a reference that scores None (or
raises) against itself could never give a reward, and its completions would be unscorable rather than
wrong, so it is dropped instead of being silently scored 0. With the built-in verifiers this is exactly
the set of references they cannot parse. The counts are in ``Task.info`` and in every report.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from typing import Any

from grpolab import verifiers
from grpolab.errors import UserError
from grpolab.rewards import score_batch
from grpolab.tasks._loading import MAX_LINE_BYTES
from grpolab.tasks._tables import Table, read_table
from grpolab.tasks.base import Problem, Task

__all__ = ["TaskDataWarning", "make_task"]

_ROLES = ("test", "validation", "train")  # the order in which duplicate prompts are kept
_SHOWN_CHARS = 60  # of an unparseable reference, in the warning


class TaskDataWarning(UserWarning):
    """Rows of a user's table were left out: empty or duplicate prompts, references the verifier cannot parse."""


def make_task(
    path: Any = None,
    *,
    prompt_column: str = "prompt",
    reference_column: str = "answer",
    verifier: str = "exact",
    template: str = "{prompt}",
    hub_config: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    test_fraction: float = 0.2,
    max_new_tokens: int = 256,
) -> Task:
    """The ``file`` task (see the module docstring).

    Args:
        path: a .jsonl / .json / .csv / .parquet file, a folder of split files, a ``save_to_disk`` folder,
            a ``datasets`` hub id, or (from Python) a pandas DataFrame or datasets Dataset / DatasetDict.
        prompt_column: the column holding the prompt text.
        reference_column: the column holding what the verifier compares a completion with.
        verifier: a verifier name in ``grpolab.verifiers`` or a dotted path ``pkg.module:function``.
        template: the prompt shown to the model; ``{prompt}`` stands for the prompt cell.
        hub_config: the ``datasets`` config name of a hub id (e.g. ``main`` for ``openai/gsm8k``).
        limit: keep at most this many problems of each split (in data order); None keeps all.
        seed: seeds the hash that cuts single-split data into train and test.
        test_fraction: the share of single-split data that goes to test.
        max_new_tokens: the default generation budget per completion.
    """
    _check_option_types(prompt_column=prompt_column, reference_column=reference_column, verifier=verifier,
                        template=template, hub_config=hub_config, limit=limit, seed=seed, test_fraction=test_fraction,
                        max_new_tokens=max_new_tokens)
    if path is None:
        raise UserError("the file task needs data: pass --data with a .jsonl, .csv or .parquet file, a folder of "
                        "train/test files, or a datasets hub id")
    if "{prompt}" not in template:
        raise UserError(f"template {template!r} has no {{prompt}}; write where the prompt goes, "
                        "e.g. 'Q: {prompt}\\nA:'")
    if not 0.0 < test_fraction < 1.0:
        raise UserError(f"test_fraction must be strictly between 0 and 1, got {test_fraction}")
    score_fn = verifiers.get_verifier(verifier)
    table = read_table(path, hub_config)
    _check_columns(table, (prompt_column, reference_column))
    roles, how = _roles(table, seed, test_fraction)
    counts = {"empty_prompts": 0, "duplicate_prompts": 0}
    kept, raw_prompts = _problems(roles, prompt_column, reference_column, template, counts, table.source)
    if roles.get("test") is None:  # cut by the prompt cell, so that the template does not move the cut
        pool = kept["train"]
        kept["test"] = [p for p in pool if _in_test(raw_prompts[p.id], seed, test_fraction)]
        kept["train"] = [p for p in pool if not _in_test(raw_prompts[p.id], seed, test_fraction)]
    bad = _unparseable(kept, score_fn, verifier)
    counts["unparseable_references"] = sum(p.reference in bad for problems in kept.values() for p in problems)
    kept = {role: [p for p in problems if p.reference not in bad] for role, problems in kept.items()}
    info = _info(table, (prompt_column, reference_column, verifier), how, counts, bad)
    _warn_left_out(info)
    for role in ("train", "test"):
        if not kept[role]:
            raise UserError(f"the file task has no {role} problems left from {table.source} ({_left_out_text(info)});"
                            " check the data, the columns and --verifier")
    return Task(name="file", train=_head(kept["train"], limit), test=_head(kept["test"], limit),
                validation=_head(kept.get("validation", []), limit), verifier=verifier,
                max_new_tokens=max_new_tokens, info=info)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_OPTION_KINDS = {
    "prompt_column": ("a string", lambda v: isinstance(v, str)),
    "reference_column": ("a string", lambda v: isinstance(v, str)),
    "verifier": ("a string (a verifier's name or pkg.module:function)", lambda v: isinstance(v, str)),
    "template": ("a string holding {prompt}", lambda v: isinstance(v, str)),
    "hub_config": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "limit": ("a positive whole number or null", lambda v: v is None or (_whole(v) and v > 0)),
    "seed": ("a whole number", _whole),
    "test_fraction": ("a number between 0 and 1", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    "max_new_tokens": ("a positive whole number", lambda v: _whole(v) and v > 0),
}
"""What each option of the file task must be (``--task-options`` is JSON, so a value may be any JSON type)."""


def _check_option_types(**options: Any) -> None:
    """One line naming the first option of the wrong type, what it must be and what it was."""
    for name, value in options.items():
        kind, fits = _OPTION_KINDS[name]
        if not fits(value):
            raise UserError(f"file task: option {name} must be {kind}; got {value!r} ({type(value).__name__}); "
                            "fix it in --task-options")


def _check_columns(table: Table, columns: tuple[str, ...]) -> None:
    """One line naming the missing column and the columns that exist."""
    for column in columns:
        for split, rows in table.splits.items():
            if not any(column in row for row in rows):
                where = table.source if len(table.splits) == 1 else f"the {split!r} split of {table.source}"
                flag = "--prompt-column" if column == columns[0] else "--reference-column"
                raise UserError(f"column {column!r} is not in {where}; its columns are {', '.join(table.columns)}; "
                                f"pass {flag} with one of them")


def _roles(table: Table, seed: int, test_fraction: float) -> tuple[dict[str, Any], str]:
    """(source split name, rows) by role (test None: cut from train) and how test was chosen."""
    splits = table.splits
    validation = ("validation", splits.get("validation", []))
    if "train" in splits and "test" in splits:
        roles = {"train": ("train", splits["train"]), "test": ("test", splits["test"]), "validation": validation}
        return roles, "the data's own test split"
    pools = [name for name in splits if name != "validation"]
    if len(pools) != 1:
        raise UserError(f"{table.source} has the splits {', '.join(splits)}; name them train and test, or give a "
                        "single split to be cut by a seeded hash")
    how = f"seeded hash of the prompt (seed {seed}, test_fraction {test_fraction})"
    if pools[0] == "test":  # a benchmark's held-out split trained on: say so, since it is rarely meant
        warnings.warn(f"{table.source}'s only split is 'test', so the run trains on part of it: it is cut into train "
                      f"and test by a {how}; name a train split (train.jsonl) if the test problems must stay unseen",
                      TaskDataWarning, stacklevel=3)
    return {"train": (pools[0], splits[pools[0]]), "test": None, "validation": validation}, how


def _text(value: Any, where: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))  # 18.0 -> "18": pandas and Parquet keep an integer column with gaps as floats
    if isinstance(value, str | int | float):  # a number becomes its text: 18 -> "18"
        return str(value)
    raise UserError(f"{where} holds a {type(value).__name__}, not text; the prompt and reference columns need "
                    "plain text or numbers (flatten conversational message lists to text first)")


def _problems(roles: dict[str, Any], prompt_column: str, reference_column: str, template: str,
              counts: dict[str, int], source: str) -> tuple[dict[str, list[Problem]], dict[str, str]]:
    """Problems by role without empty prompts, and without a prompt already kept in an earlier role; and
    each kept problem's prompt cell by problem id."""
    seen: dict[str, str] = {}  # prompt cell -> problem id
    kept: dict[str, list[Problem]] = {}
    for role in _ROLES:
        name, rows = roles.get(role) or (role, [])
        kept[role] = []
        for index, row in enumerate(rows):
            where = f"row {index} of the {name} data of {source}"
            text = _text(row.get(prompt_column), f"column {prompt_column!r}, {where},")
            if not text.strip():
                counts["empty_prompts"] += 1
                continue
            if len(text) > MAX_LINE_BYTES:  # tokenizing it whole would take gigabytes before it is cut to the context
                raise UserError(f"column {prompt_column!r}, {where}, holds a prompt of {len(text):,} characters, "
                                f"more than any model's context holds (the limit is {MAX_LINE_BYTES >> 20} Mi "
                                "characters); shorten the row or remove it")
            if text in seen:
                counts["duplicate_prompts"] += 1
                continue
            seen[text] = f"{name}/{index}"
            reference = _text(row.get(reference_column), f"column {reference_column!r}, {where},")
            kept[role].append(Problem(id=f"{name}/{index}", prompt=template.replace("{prompt}", text),
                                      reference=reference))
    return kept, {problem_id: text for text, problem_id in seen.items()}


def _in_test(prompt: str, seed: int, test_fraction: float) -> bool:
    digest = hashlib.sha256(f"file-task:{seed}:{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < test_fraction


def _unparseable(kept: dict[str, list[Problem]], score_fn: Any, verifier: str) -> dict[str, str]:
    """References that score None (or raise) against themselves -> the id of the first problem holding one;
    a ``UserError`` when the verifier times out on most of them (it would on the completions too)."""
    first_id: dict[str, str] = {}
    for problems in kept.values():
        for problem in problems:
            first_id.setdefault(problem.reference, problem.id)
    references = list(first_id)
    scores = score_batch(score_fn, references, references)
    if scores.timeouts * 2 > len(references):
        raise UserError(f"the verifier {verifier} timed out on {scores.timeouts} of {len(references)} references "
                        f"scored against themselves ({scores.first_timeout}); make it return faster: every call "
                        "must finish within that limit")
    rewards = scores.rewards
    return {ref: first_id[ref] for ref, reward in zip(references, rewards, strict=True) if math.isnan(reward)}


def _info(table: Table, names: tuple[str, str, str], how: str, counts: dict[str, int],
          bad: dict[str, str]) -> dict[str, Any]:
    """What the reports show about the data: where it came from, its rows, and what was left out."""
    prompt_column, reference_column, verifier = names
    example = next(iter(bad.items()), None)
    return {
        "source": table.source, "prompt_column": prompt_column, "reference_column": reference_column,
        "verifier": verifier, "rows": {name: len(rows) for name, rows in table.splits.items()}, "test_split": how,
        **counts,
        "unparseable_example": None if example is None else f"{example[1]}: {example[0][:_SHOWN_CHARS]!r}",
    }


def _left_out_text(info: dict[str, Any]) -> str:
    text = (f"{info['empty_prompts']} empty prompt(s), {info['duplicate_prompts']} duplicate prompt(s) and "
            f"{info['unparseable_references']} reference(s) the verifier {info['verifier']!r} cannot parse")
    return text + (f" (e.g. {info['unparseable_example']})" if info["unparseable_example"] else "")


def _warn_left_out(info: dict[str, Any]) -> None:
    if info["empty_prompts"] or info["duplicate_prompts"] or info["unparseable_references"]:
        message = f"file task ({info['source']}): left out {_left_out_text(info)}; they are neither trained nor tested"
        warnings.warn(message, TaskDataWarning, stacklevel=4)


def _head(problems: list[Problem], limit: int | None) -> tuple[Problem, ...]:
    if limit is not None and limit < 0:
        raise UserError(f"limit must be >= 0, got {limit}")
    return tuple(problems if limit is None else problems[:limit])
