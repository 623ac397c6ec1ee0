"""lighteval's details file, ``details_<task>_<date>.parquet`` (lighteval 0.13, ``--save-details``).

What lighteval writes (``lighteval/logging/evaluation_tracker.py`` ``save`` and ``save_details``, under
``<output_dir>/details/<model>/<date>/``): one row per document, ``Dataset.from_list([asdict(detail)])`` of
``DetailsLogger.Detail`` (``lighteval/logging/info_loggers.py``) with its columns sorted: ``doc`` (the ``Doc``
dataclass of ``lighteval/tasks/requests.py``: ``query``, ``choices``, ``gold_index``, ``id``, ``task_name``,
``num_samples``, ...), ``metric`` (the metric values) and ``model_response`` (the ``ModelResponse`` of
``lighteval/models/model_output.py``: ``text`` holds one string per sample, ``text_post_processed`` the same
with reasoning removed when lighteval post-processed it, plus tokens and log-probs). ``<task>`` is the task's
``full_name`` (``gsm8k|0``); ``<date>`` is ``datetime.now().isoformat()`` with ``:`` replaced by ``-``.

Read here: ``doc.id`` (``row N`` when empty, N 1-based: no id lighteval writes), the reference
``doc.choices[doc.gold_index]`` (the first
gold, as lighteval's ``Doc.get_golds()[0]``; a list ``gold_index`` uses its first entry) and every string of
``model_response.text``, raw, as generated (lighteval's metrics read ``text_post_processed`` when set;
grpolab's verifiers take the last answer of the whole text either way). Refused, naming file and row (1-based):
a row without those fields, no text, an empty ``choices``, a repeated non-empty ``doc.id``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpolab.errors import UserError
from grpolab.harness_samples.records import HarnessSamples

__all__ = ["FILE_NAME", "read_lighteval"]

FILE_NAME = re.compile(r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.parquet$")
"""lighteval's details file name: ``details_<task>_<date>.parquet``."""

_COLUMNS = ("doc", "model_response")


def _table_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several types for a damaged or foreign file
        raise UserError(f"{path}: not a readable parquet file ({type(error).__name__}: {error})") from None
    missing = [name for name in _COLUMNS if name not in table.column_names]
    if missing:
        raise UserError(f"{path}: no column {', '.join(missing)}; not a lighteval details file "
                        f"(its columns: {', '.join(table.column_names)})")
    return table.select(list(_COLUMNS)).to_pylist()


def _reference(doc: Any, where: str) -> str:
    if not isinstance(doc, dict) or not doc.get("choices"):
        raise UserError(f"{where}: doc has no choices to take the reference from")
    gold = doc.get("gold_index", 0)
    index = gold[0] if isinstance(gold, list) and gold else gold
    if not isinstance(index, int) or not 0 <= index < len(doc["choices"]):
        raise UserError(f"{where}: doc.gold_index {gold!r} does not index doc.choices")
    return str(doc["choices"][index])


def _texts(response: Any, where: str) -> list[str]:
    texts = response.get("text") if isinstance(response, dict) else None
    if not texts or not all(isinstance(text, str) for text in texts):
        raise UserError(f"{where}: model_response.text holds no generated text (a loglikelihood task?); only "
                        "generative tasks can be re-scored")
    return list(texts)


def read_lighteval(path: Path) -> HarnessSamples:
    """Every document (row) of one lighteval details file with all its sampled texts."""
    match = FILE_NAME.match(path.name)
    if match is None:
        raise UserError(f"{path}: not a lighteval details file name (details_<task>_<date>.parquet)")
    samples = HarnessSamples("lighteval", path, match["task"])
    seen: dict[str, int] = {}
    for row, record in enumerate(_table_rows(path), start=1):
        where = f"{path}, row {row}"
        doc = record["doc"]
        doc_id = (str(doc.get("id") or "") if isinstance(doc, dict) else "") or f"row {row}"  # never a real id
        if doc_id in seen:
            raise UserError(f"{where}: document {doc_id} appears again (first at row {seen[doc_id]})")
        seen[doc_id] = row
        samples.add(doc_id, _reference(doc, where), _texts(record["model_response"], where))
        samples.records += 1
    if not samples.prompts:
        raise UserError(f"{path}: no rows in the file")
    return samples
