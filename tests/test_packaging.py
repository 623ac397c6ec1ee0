"""The install is quiet: setuptools reads pyproject.toml without a deprecation warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import tomllib

pytestmark = pytest.mark.fast

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_pyproject_reads_without_setuptools_warnings() -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), str(PYPROJECT))
    messages = [str(w.message).splitlines()[0] for w in caught if "licen" in str(w.message).lower()]
    assert messages == []  # was: "`project.license` as a TOML table is deprecated" on every install


def test_the_licence_is_an_spdx_string_that_the_required_setuptools_reads() -> None:
    data = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert data["project"]["license"] == "MIT"  # the same licence as the old {text = "MIT"}
    assert "setuptools>=77" in data["build-system"]["requires"]  # PEP 639 strings need setuptools 77
