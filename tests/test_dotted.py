"""``grpolab.dotted.import_module``: a module name is imported, a file path given for one is one line."""

from __future__ import annotations

import json

import pytest

from grpolab.dotted import import_module
from grpolab.errors import UserError


def test_a_module_name_is_imported() -> None:
    assert import_module("json", "json:loads", "task", "fix it") is json


@pytest.mark.parametrize("name", ["../x", "tasks.py/x", "my-tasks", "", "a..b", ".rel"])
def test_a_name_that_is_not_a_module_name_names_the_spec_and_the_fix(name: str) -> None:
    with pytest.raises(UserError, match=r"names the module .* not a Python module name.*; put it on PYTHONPATH$"):
        import_module(name, f"{name}:f", "task", "put it on PYTHONPATH")


def test_a_missing_module_names_the_spec() -> None:
    with pytest.raises(UserError, match=r"cannot import module 'no_such_module_x' for verifier 'no_such_module_x:f'"):
        import_module("no_such_module_x", "no_such_module_x:f", "verifier", "install it")
