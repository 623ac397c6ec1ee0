"""docs/embedded-model.md: the starting competence it quotes for both embedded models is what the models'
``competence.json`` (written by scripts/make_embedded_model.py beside the shipped weights) holds, to the digits
printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "src" / "grpolab" / "assets"
DOC = " ".join((ROOT / "docs" / "embedded-model.md").read_text(encoding="utf-8").split())


def _competence(model: str) -> dict:
    return json.loads((ASSETS / model / "competence.json").read_text(encoding="utf-8"))


def _printed(pattern: str) -> str:
    """The number the doc prints where ``pattern`` (a regex with one group) matches."""
    found = re.search(pattern, DOC)
    assert found, f"docs/embedded-model.md no longer says {pattern!r}"
    return found.group(1)


def _rounds_to(printed: str, value: float) -> bool:
    """Whether ``value`` rounds (half up or half down) to ``printed``, a number with its digits as printed."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed) - value) <= 0.5 * 10**-decimals * (1 + 1e-9)


def test_the_reverse_models_train_histogram_is_its_competence() -> None:
    histogram = _competence("embedded")["train_histogram"]
    assert "| prompts | " + " | ".join(str(count) for count in histogram) + " |" in DOC


@pytest.mark.parametrize(
    ("key", "pattern"),
    [
        ("train_mean_success", r"mean success \*\*([\d.]+)\*\*"),
        ("degenerate_rate_real", r"D_real = ([\d.]+)\*\*"),
        ("degenerate_rate_iid", r"D_iid = ([\d.]+)\*\*"),
        ("test_mean_success", r"mean success at T = 1 \*\*([\d.]+)\*\*"),
        ("test_greedy_accuracy", r"greedy accuracy \*\*([\d.]+)\*\*"),
        ("sft_seconds", r"SFT took (\d+) s while"),
    ],
)
def test_the_reverse_models_numbers_are_its_competence(key: str, pattern: str) -> None:
    assert _rounds_to(_printed(pattern), _competence("embedded")[key])


def test_the_jensen_gap_is_the_difference_of_the_two_rates() -> None:
    competence = _competence("embedded")
    gap = competence["degenerate_rate_real"] - competence["degenerate_rate_iid"]
    assert _rounds_to(_printed(r"a Jensen gap of ([\d.]+)"), gap)


def test_the_family_success_row_is_its_competence() -> None:
    families = _competence("embedded")["test_family_success"]
    names = [name.strip(" `") for name in _printed(r"\| family \| (.*?) \| \|---").split("|")]
    printed = _printed(r"\| success \| ((?:[\d.]+ \| )*[\d.]+) \|").split(" | ")
    assert sorted(names) == sorted(families)
    assert all(_rounds_to(value, families[name]) for name, value in zip(names, printed, strict=True))


def test_the_arith_models_numbers_are_its_competence() -> None:
    competence = _competence("embedded-arith")
    assert " / ".join(str(c) for c in competence["train_histogram"]) + " prompts are solved" in DOC
    assert _rounds_to(_printed(r"\(D_real ([\d.]+) against"), competence["degenerate_rate_real"])
    assert _rounds_to(_printed(r"against D_iid ([\d.]+)\)"), competence["degenerate_rate_iid"])
    assert _rounds_to(_printed(r"greedy test accuracy is (\d+\.\d+)"), competence["test_greedy_accuracy"])
    assert _rounds_to(_printed(r"SFT took (\d+) s on this machine"), competence["sft_seconds"])
