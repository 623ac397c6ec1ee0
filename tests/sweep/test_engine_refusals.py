"""``grpolab compare --engine trl`` refuses an arm that TRL cannot run before any run starts, in the engine's own
line (it ran the other arms and failed each run of that one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpolab.cli import main
from grpolab.remedies import REMEDIES


@pytest.mark.parametrize(("arm", "message"), [
    ("optimal_token_baseline", "TRL's GRPOTrainer takes one advantage per completion"),
    ("dr_grpo+curriculum", "not supported by engine trl"),
])
def test_an_arm_trl_cannot_run_is_refused_before_any_run(arm: str, message: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    code = main(["compare", "--engine", "trl", "--estimators", f"dr_grpo,{arm}", "--seeds", "1", "--steps", "1",
                 "--lrs", "1e-3", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (out / "runs").exists()


@pytest.mark.parametrize("suffix", [r.suffix for r in REMEDIES if "trl" not in r.engines])
def test_a_remedy_trl_refuses_is_named_by_its_suffix_as_written(suffix: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    code = main(["compare", "--engine", "trl", "--estimators", f"sign{suffix}", "--seeds", "1", "--steps", "1",
                 "--lrs", "1e-3", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"arm 'sign{suffix}': {suffix} is not supported by engine trl" in err
    assert f"drop {suffix} from --estimators" in err and " --replay" not in err and " --dynamic" not in err
    assert not out.exists()
