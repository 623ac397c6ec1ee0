"""The command-line flags of the subcommands, derived from the config dataclasses of ``grpolab.config``.

One flag per field (``group_size`` -> ``--group-size``), its help the docstring under the field, its type
the field's: ``bool`` -> ``--x / --no-x``, ``dict`` -> a JSON object, ``tuple`` -> comma-separated numbers; a
field with ``choices`` in its metadata (``grpolab.config.fields``) gets them as argparse ``choices``.
A command exposes every field (``grpolab train``) or the ones it uses (``only``: ``grpolab eval``,
``grpolab gradients``), may give some fields its own defaults, visibly, in a ``*_TRAIN_DEFAULTS`` dict
(shown in the help), and may keep an older spelling of a flag as an alias (``--n`` for ``--eval-samples``).
Every flag's default is None, so that a flag the user did not set is recognisable: precedence is the class
defaults < the command's defaults < the config file < the flags. Why argparse and not tyro: ``grpolab.config``.

``--help`` shows the flags in titled groups (model, task, sampling, loss, optimiser, evaluation, sweep, engine,
output): each field's ``group`` metadata picks its group, ``grpolab.config.fields.HELP_GROUPS`` holds the
titles and their order (``argument_groups``); a command puts its own flags (``--out``) in one of them, and a
group with no flag is not shown.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import itertools
import json
import textwrap
import types
import typing
from collections.abc import Iterable
from typing import Any

from grpolab.config import TrainConfig, build_config, load_config_file
from grpolab.config.fields import HELP_GROUPS, help_title

__all__ = ["add_config_arguments", "argument_groups", "config_from_args", "field_docs"]


@functools.cache
def field_docs(cls: type = TrainConfig) -> dict[str, str]:
    """The docstring under each field of a dataclass, read from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                docs[node.target.id] = " ".join(str(following.value.value).split())
    return docs


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def argument_groups(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """One argparse group per entry of ``HELP_GROUPS``, titled from it, in its order (name -> group)."""
    return {name: parser.add_argument_group(help_title(name)) for name in HELP_GROUPS}


def add_config_arguments(parser: argparse.ArgumentParser, cls: type = TrainConfig,
                         defaults: dict[str, Any] | None = None, help_overrides: dict[str, str] | None = None, *,
                         only: Iterable[str] | None = None, aliases: dict[str, str] | None = None,
                         groups: dict[str, Any] | None = None) -> None:
    """Add one flag per field of ``cls`` (or per field named in ``only``, in the class's order), each in the help
    group its metadata names (``groups``, from ``argument_groups``; made here when not given); every default is
    None so that unset flags are recognisable. ``defaults`` are the command's own defaults for some fields
    (shown in the help instead of the class's); ``help_overrides`` replaces the help of some fields
    (setting -> text); ``aliases`` gives a field a second flag (setting -> '--old-spelling')."""
    groups = groups if groups is not None else argument_groups(parser)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    defaults, aliases = defaults or {}, aliases or {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    chosen = set(fields) if only is None else set(only)
    unknown = sorted(chosen - set(fields) | set(defaults) - set(fields) | set(aliases) - chosen)
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not fields of {cls.__name__} given flags here")
    for name in (n for n in fields if n in chosen):
        kind = hints[name]
        shown = defaults[name] if name in defaults else _default_text(fields[name])
        help_text = f"{docs.get(name, '')} (default: {shown})".replace("%", "%%")
        help_text = (help_overrides or {}).get(name, help_text)
        spellings = [_flag(name), *([aliases[name]] if name in aliases else [])]
        group = groups[fields[name].metadata["group"]]
        if kind is bool:
            group.add_argument(*spellings, dest=name, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
        else:  # a field with choices lists them in the usage and the help, and argparse refuses any other value
            group.add_argument(*spellings, dest=name, type=_parser_for(kind, name), default=None, help=help_text,
                               choices=fields[name].metadata.get("choices"))


def _default_text(f: dataclasses.Field[Any]) -> str:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return json.dumps(f.default_factory())  # type: ignore[misc]
    return str(f.default)


def _parser_for(kind: Any, name: str) -> Any:
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if typing.get_origin(kind) in (typing.Union, types.UnionType) else kind
    if base in (int, float, str):
        return base
    if typing.get_origin(base) is tuple or base is tuple:
        return lambda text: tuple(float(x) for x in text.split(","))
    if typing.get_origin(base) is dict or base is dict:
        return _json_dict(name)
    return str


def _json_dict(name: str) -> Any:
    def parse(text: str) -> dict[str, Any]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise argparse.ArgumentTypeError(f"{name} must be a JSON object such as '{{\"k\": 2}}': {error}") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{name} must be a JSON object such as '{{\"k\": 2}}'")
        return value

    return parse


def config_from_args(args: argparse.Namespace, cls: type = TrainConfig, *,
                     file_values: dict[str, Any] | None = None) -> Any:
    """The config of ``cls`` from config-file values (default: read ``args.config``) and the set flags."""
    if file_values is None:
        file_values = load_config_file(args.config) if getattr(args, "config", None) else {}
    values = dict(file_values)
    for f in dataclasses.fields(cls):
        flag_value = getattr(args, f.name, None)
        if flag_value is not None:
            values[f.name] = flag_value
    return build_config(values, cls)
