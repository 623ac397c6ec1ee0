"""``grpolab eval``: the settings it takes from ``TrainConfig`` reach the evaluation."""

from __future__ import annotations

import json

import pytest
import torch

from grpolab.cli import main

pytestmark = pytest.mark.fast


def test_eval_applies_threads_and_limits(capsys: pytest.CaptureFixture[str]) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert main(["eval", "--model", "embedded", "--task", "reverse", "--n", "0", "--limit", "3",
                     "--threads", "1", "--json"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["model"] == "embedded" and result["n"] == 0 and 0.0 <= result["greedy_accuracy"] <= 1.0
