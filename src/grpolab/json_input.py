"""JSON that a user gave grpolab (a data file's rows, a harness's samples), read with one line per fault.

``parse_json`` is ``json.loads`` whose every failure is a ``UserError`` naming where the text came from: bad JSON,
nesting past Python's recursion limit, integers past its 4,300-digit limit, and lone surrogates (``"\\ud800"``,
which JSON allows and UTF-8 cannot hold). Nothing here departs from the papers: they say nothing of input files.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grpolab.errors import UserError

__all__ = ["parse_json"]


def parse_json(text: str, where: str, fix: str) -> Any:
    """``json.loads(text)``; ``UserError`` naming ``where`` for bad JSON, nesting past Python's recursion limit
    and integers past Python's 4,300-digit limit (``RecursionError`` / ``ValueError`` from ``json``), and lone
    surrogates (``"\\ud800"``: JSON allows the escape, UTF-8 cannot hold what it reads as)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"{where}: not valid JSON ({error.msg} at line {error.lineno} column {error.colno}); "
                        f"{fix}") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply to read (arrays or objects over about 1,000 levels "
                        "deep); flatten it") from None
    except ValueError as error:  # int("9" * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        if "digits" not in str(error):
            raise
        raise UserError(f"{where}: holds an integer of more than 4300 digits, which Python will not read; "
                        "shorten it or write it as a string") from None
    if _ESCAPED_SURROGATE.search(text):
        _refuse_lone_surrogates(value, where)
    return value


# a JSON escape of a UTF-16 surrogate: a pair reads as one character, a lone one as a string UTF-8 cannot hold
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _refuse_lone_surrogates(value: Any, where: str) -> None:
    """``UserError`` naming ``where`` when ``value`` holds a lone surrogate (``"\\ud800"``): not text, so it would fail
    when hashed, tokenized or written, far from the line that holds it."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        found = f"\\u{ord(error.object[error.start]):04x}"
        raise UserError(f"{where}: holds a lone surrogate ({found}), half of a UTF-16 pair and not text; write the "
                        "character it stands for, or remove it") from None
