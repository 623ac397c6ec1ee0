"""``grpolab.json_input.parse_json``: every way ``json.loads`` fails on a user's text is one ``UserError`` naming
where the text came from and the fix."""

from __future__ import annotations

import pytest

from grpolab.errors import UserError
from grpolab.json_input import parse_json

pytestmark = pytest.mark.fast


def test_valid_json_is_json_loads() -> None:
    assert parse_json('{"a": [1, 2.5, "x", null]}', "f:1", "fix it") == {"a": [1, 2.5, "x", None]}
    assert parse_json('"\\ud83d\\ude00"', "f:1", "fix it") == "\U0001f600"  # a surrogate pair is one character


@pytest.mark.parametrize(("text", "needles"), [
    ("{oops", ("f:3: not valid JSON", "line 1 column 2", "fix it")),
    ("[" * 100_000 + "]" * 100_000, ("f:3: JSON nested too deeply", "flatten it")),
    ("9" * 5000, ("f:3: holds an integer of more than 4300 digits", "write it as a string")),
    ('{"a": "\\ud800"}', ("f:3: holds a lone surrogate (\\ud800)", "remove it")),
])
def test_each_failure_is_one_line_naming_where(text: str, needles: tuple[str, ...]) -> None:
    with pytest.raises(UserError) as raised:
        parse_json(text, "f:3", "fix it")
    message = str(raised.value)
    assert "\n" not in message and all(needle in message for needle in needles), message
