"""``grpolab export``: its flags, and their mistakes in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpolab.cli import main

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("flags", "said"), [
    (["--step", "0"], "--step must be a training step >= 1, got 0"),
    (["--seed", "one"], "--seed takes whole numbers separated by commas, got 'one'"),
    (["--arm", "sign"], "--arm and --seed choose runs of a grpolab compare directory"),
])
def test_a_flag_mistake_is_one_line(flags: list[str], said: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grpolab export: error: ") and said in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_no_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path} holds no config.yaml, so it is no grpolab run directory" in capsys.readouterr().err


def test_export_is_listed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "export" in capsys.readouterr().out
