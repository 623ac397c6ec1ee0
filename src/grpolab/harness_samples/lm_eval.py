"""lm-eval's per-sample file, ``samples_<task>_<date>.jsonl`` (lm-eval 0.4.x, ``--log_samples``).

What lm-eval writes (``lm_eval/evaluator.py`` builds each line, ``lm_eval/loggers/evaluation_tracker.py``
``save_results_samples`` writes it): one JSON object per line, one line per document *and filter*, with
``doc_id``, ``doc``, ``target`` (``str(doc_to_target(doc))``), ``arguments`` (``{"gen_args_0": {"arg_0":
prompt, "arg_1": generation kwargs}}``), ``resps`` (one list per request: for a generative task with
``repeats: n`` a single request holding all n responses, ``[[r_1, ..., r_n]]``), ``filtered_resps`` (the
filter's output), ``filter``, ``metrics``, ``doc_hash``, ``prompt_hash``, ``target_hash`` and the metric
values. ``<date>`` is ``datetime.now().isoformat()`` with ``:`` replaced by ``-``.

Read here: ``doc_id``, ``target`` and every string in ``resps``, raw (the filters' outputs and lm-eval's
metric values are ignored: the responses are scored again). A document's lines for its other filters must
carry the same ``target`` and ``resps``; it is counted once. Anything else is refused with the file and
line: a line that is not JSON (a torn last line), a missing field, responses that are not text (a
loglikelihood task), two lines for one document and one filter, or two lines of one document that disagree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.harness_samples.records import HarnessSamples
from grpolab.json_input import parse_json

__all__ = ["FILE_NAME", "read_lm_eval"]

FILE_NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.jsonl$")
"""lm-eval's samples file name: ``samples_<task>_<date>.jsonl``."""

_REQUIRED = ("doc_id", "target", "resps")


def _where(path: Path, line: int) -> str:
    return f"{path}, line {line}"


def _parse(text: str, path: Path, line: int) -> dict[str, Any]:
    record = parse_json(text, _where(path, line), "the file is torn or not an lm-eval samples file")
    if not isinstance(record, dict):
        raise UserError(f"{_where(path, line)}: a JSON {type(record).__name__}, not an lm-eval sample object")
    missing = [key for key in _REQUIRED if key not in record]
    if missing:
        raise UserError(f"{_where(path, line)}: no {', '.join(missing)}; not an lm-eval samples line")
    return record


def _responses(resps: Any, path: Path, line: int) -> list[str]:
    """Every response of one line: ``resps`` is a list (one per request) of lists of strings."""
    if not isinstance(resps, list) or not all(isinstance(request, list) for request in resps):
        raise UserError(f"{_where(path, line)}: resps is not a list of lists")
    flat = [response for request in resps for response in request]
    if not flat:
        raise UserError(f"{_where(path, line)}: resps holds no response")
    if not all(isinstance(response, str) for response in flat):
        raise UserError(f"{_where(path, line)}: the responses are not text (a loglikelihood task?); only "
                        "generative tasks can be re-scored")
    return flat


def read_lm_eval(path: Path) -> HarnessSamples:
    """Every document of one lm-eval samples file, counted once whatever its number of filter lines."""
    match = FILE_NAME.match(path.name)
    if match is None:
        raise UserError(f"{path}: not an lm-eval samples file name (samples_<task>_<date>.jsonl)")
    samples = HarnessSamples("lm-eval", path, match["task"])
    try:
        _read_lines(path, samples)
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason}); lm-eval writes UTF-8: "
                        "re-encode the file or re-run lm-eval") from None
    if not samples.prompts:
        raise UserError(f"{path}: no samples in the file")
    return samples


def _read_lines(path: Path, samples: HarnessSamples) -> None:
    """Add every document of ``path`` to ``samples`` (a leading UTF-8 byte-order mark is skipped)."""
    first_line: dict[str, tuple[int, str, list[str]]] = {}  # doc_id -> (line, target, responses)
    filters_seen: dict[tuple[str, str], int] = {}
    blank = None  # the first empty line since the last sample: harmless at the end of the file only
    with path.open(encoding="utf-8-sig") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                blank = blank or line
                continue
            if blank is not None:
                raise UserError(f"{_where(path, blank)}: an empty line between samples; lm-eval writes one sample per "
                                "line: remove the empty line")
            record = _parse(text, path, line)
            missing = [name for name in ("doc_id", "target") if record[name] is None]
            if missing:
                raise UserError(f"{_where(path, line)}: {' and '.join(missing)} is null; lm-eval writes the document's "
                                "index and its reference there: re-run lm-eval with --log_samples")
            doc_id, target = str(record["doc_id"]), str(record["target"])
            responses = _responses(record["resps"], path, line)
            key = (doc_id, str(record.get("filter", "none")))
            if key in filters_seen:
                raise UserError(f"{_where(path, line)}: document {doc_id} appears again for filter {key[1]} "
                                f"(first at line {filters_seen[key]})")
            filters_seen[key] = line
            samples.records += 1
            if doc_id in first_line:
                first, first_target, first_responses = first_line[doc_id]
                if (first_target, first_responses) != (target, responses):
                    raise UserError(f"{_where(path, line)}: document {doc_id} has other responses or another "
                                    f"target than at line {first}")
                continue
            first_line[doc_id] = (line, target, responses)
            samples.add(doc_id, target, responses)
