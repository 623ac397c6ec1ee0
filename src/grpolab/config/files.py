"""Config files: YAML or TOML in, YAML out, and building a config class from a file's values.

YAML is read as TOML reads numbers (``1e-5`` is a float, where YAML 1.1 reads a string), and saved so that
it reads back unchanged. Every value is type-checked against the field it sets (``checks.check_types``).
YAML aliases (``*name``) are refused: a few lines of nested aliases expand to gigabytes.

A run's saved copy (``save_config``) is written atomically (``grpolab.io``) between a first line
``# grpolab settings, schema 1`` and a last line ``# end of grpolab settings: N settings``. ``read_saved_settings``
tells an old file (settings added since it was written take their defaults) from a damaged one (empty, first
line without last line, fewer settings than the last line counts): a damaged file is refused, never filled in
with defaults.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

import tomllib
import yaml

from grpolab.config.checks import check_types
from grpolab.config.schema import TrainConfig
from grpolab.errors import UserError
from grpolab.io import atomic_write_text

__all__ = ["SAVED_FOOTER", "SAVED_HEADER", "build_config", "load_config_file", "read_saved_settings", "save_config",
           "split_file_values", "yaml_text"]

SAVED_HEADER = "# grpolab settings, schema 1"
SAVED_FOOTER = "# end of grpolab settings"


class _DuplicateKey(yaml.YAMLError):
    """A mapping of a config file sets one key twice (YAML keeps the last value without a word; TOML refuses)."""

    def __init__(self, key: Any, first_line: int, second_line: int) -> None:
        super().__init__(f"sets {key!r} twice (line {first_line} and line {second_line}); keep one of them")


class _Loader(yaml.SafeLoader):
    """Safe YAML that reads numbers as TOML does: ``1e-5`` is a float (YAML 1.1 reads it as a string),
    refuses aliases (a billion-laughs file of nested aliases would expand to gigabytes) and refuses a key set
    twice in one mapping (YAML would keep the last value silently)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key, line = self.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise _DuplicateKey(key, seen[key], line)
                    seen[key] = line
                except TypeError:  # an unhashable key: the base class refuses it
                    continue
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed in a config file; "
                                              "write the value out", mark)
        return super().compose_node(parent, index)


class _Dumper(yaml.SafeDumper):
    """Safe YAML that quotes the strings ``_Loader`` would read as numbers (e.g. ``lrs: '1e-4,3e-4'`` stays
    plain, ``lrs: '1e-4'`` is quoted), so that a saved file reads back as what was saved."""


for _yaml_class in (_Loader, _Dumper):
    _yaml_class.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"),
                                      list("-+0123456789"))


def yaml_text(data: dict[str, Any]) -> str:
    """``data`` as YAML that ``load_config_file`` reads back unchanged."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (.yaml/.yml) or TOML (.toml) config file into a dict."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file {path} does not exist; pass an existing YAML or TOML file to --config")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (some Windows editors write one) is skipped
    except UnicodeDecodeError as error:
        raise UserError(f"config file {path} is not UTF-8 text ({error.reason}); pass a YAML or TOML file") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.load(text, Loader=_Loader)
    except _DuplicateKey as error:
        raise UserError(f"config file {path} {error}") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        problem = " ".join(str(error).split())  # one line, even for YAML's multi-line messages
        raise UserError(f"config file {path} is not valid {path.suffix.lstrip('.').upper()}: {problem}") from None
    except RecursionError:
        raise UserError(f"config file {path} is nested too deeply to read (lists or mappings over about 1,000 "
                        "levels deep); flatten it: no setting takes such a value") from None
    except ValueError as error:  # int("9" * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        if "digits" not in str(error):
            raise
        raise UserError(f"config file {path} holds an integer of more than 4300 digits, which Python will not "
                        "read; shorten it: no setting takes such a number") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"config file {path} must hold a mapping of setting names to values")
    return data


def build_config(values: dict[str, Any], cls: type = TrainConfig) -> Any:
    """``cls(**values)`` with a clear error for unknown keys and wrong types."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"unknown setting(s) {', '.join(unknown)}; known settings: {', '.join(sorted(known))}")
    if "adam_betas" in values and isinstance(values["adam_betas"], list):
        values = {**values, "adam_betas": tuple(values["adam_betas"])}
    check_types(values, cls)
    hints = typing.get_type_hints(cls)  # an int given for a float setting is saved as the float that runs
    values = {k: float(v) if type(v) is int and float in (hints[k], *typing.get_args(hints[k])) else v
              for k, v in values.items()}
    try:
        return cls(**values)
    except TypeError as error:
        raise UserError(f"bad setting: {error}") from None


def split_file_values(values: dict[str, Any], *classes: type) -> list[dict[str, Any]]:
    """Split one config file's keys among several config classes; unknown keys are an error."""
    parts: list[dict[str, Any]] = []
    claimed: set[str] = set()
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}
        parts.append({k: v for k, v in values.items() if k in names})
        claimed |= names
    unknown = sorted(set(values) - claimed)
    if unknown:
        known = ", ".join(sorted(claimed))
        raise UserError(f"unknown setting(s) {', '.join(unknown)} in the config file; known: {known}")
    return parts


def save_config(config: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (the run's saved copy), atomically, between ``SAVED_HEADER`` and
    ``SAVED_FOOTER``."""
    values = config.to_dict()
    atomic_write_text(path, f"{SAVED_HEADER}\n{yaml_text(values)}{SAVED_FOOTER}: {len(values)} settings\n")


def read_saved_settings(path: str | Path) -> dict[str, Any]:
    """The values of a saved copy written by ``save_config``; ``UserError`` saying how the file is damaged
    (empty, cut short, a setting missing). A file without ``SAVED_HEADER`` predates it: its values are
    returned as they are, and settings added since take their defaults."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path} cannot be read ({error})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise UserError(f"{path} is damaged: not UTF-8 text ({error.reason} at byte {error.start}, line {line}); "
                        "restore it from a copy, or mend that line (grpolab wrote it as YAML text)") from None
    if not text.strip():
        raise UserError(f"{path} is empty (its write was cut short, e.g. by a full disk)")
    values = load_config_file(path)
    lines = text.rstrip("\n").splitlines()
    if lines[0].strip() != SAVED_HEADER:
        return values
    footer = re.fullmatch(re.escape(SAVED_FOOTER) + r": (\d+) settings", lines[-1].strip())
    if footer is None:
        raise UserError(f"{path} is cut short (its last line {SAVED_FOOTER!r} is missing)")
    if len(values) != int(footer.group(1)):
        raise UserError(f"{path} is damaged: it holds {len(values)} of the {footer.group(1)} settings it was "
                        "written with")
    return values
