"""The compare report's Data section says how many prompts each evaluation scored (was: only the split's size,
200, where ``--eval-limit 8`` scored 8)."""

from __future__ import annotations

import pytest

from grpolab.report.data_section import data_sections

pytestmark = pytest.mark.fast

SUMMARY = {"task": "reverse", "verifier": "exact", "problems": {"train": "fresh prompts every step", "validation": 200,
                                                                "test": 200}}


@pytest.mark.parametrize(("train", "said"), [
    ({"eval_limit": 8, "eval_samples": 4, "eval_split": "test"},
     "Each evaluation scored the first 8 prompts of the test split (--eval-limit 8 of its 200), greedily and with 4 "
     "samples each."),
    ({"eval_limit": None, "eval_samples": 0, "eval_split": "validation"},
     "Each evaluation scored the first 200 prompts of the validation split, greedily."),
    ({"eval_limit": 500, "eval_samples": 8}, "Each evaluation scored the first 200 prompts of the test split, "
                                             "greedily and with 8 samples each."),
])
def test_the_prompts_each_evaluation_scored_are_said(train: dict, said: str) -> None:
    (section,) = data_sections({"task": SUMMARY, "train": train})
    assert said in section.paragraphs
