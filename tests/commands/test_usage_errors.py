"""Usage errors of the command line: one line that points to the subcommand's help, and a TRL user's
``GRPOConfig`` names answered with grpolab's flag (from the TRL mapping, ``trl_engine.arguments.MAPPED``)."""

from __future__ import annotations

import pytest

from grpolab.cli import main
from grpolab.train.trl_engine.arguments import MAPPED, settings_for_trl_name

pytestmark = pytest.mark.fast


def _error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    return lines[0]


@pytest.mark.parametrize(("trl", "ours"), [("--num-generations", "--group-size"), ("--learning_rate", "--lr"),
                                           ("--learning-rate", "--lr"), ("--max-steps", "--steps"),
                                           ("--max-completion-length", "--max-new-tokens")])
def test_a_trl_name_is_answered_with_grpolabs_flag(trl: str, ours: str, capsys: pytest.CaptureFixture) -> None:
    line = _error(capsys, ["train", trl, "4"])
    assert line.startswith("grpolab train: error: unrecognized arguments:")
    assert f"{trl} is TRL's GRPOConfig name: grpolab's is {ours}" in line
    assert line.endswith("(see grpolab train --help)")


def test_an_unknown_flag_points_to_the_subcommands_help_without_a_hint(capsys: pytest.CaptureFixture) -> None:
    line = _error(capsys, ["compare", "--bogus", "1"])
    assert line == "grpolab compare: error: unrecognized arguments: --bogus 1 (see grpolab compare --help)"


def test_every_mapped_name_that_differs_from_grpolabs_is_known() -> None:
    """The hint comes from the mapping itself: each setting whose first TRL target has another name is found."""
    for setting, mapped in MAPPED.items():
        first = mapped.targets[0] if mapped.targets else None
        if first and "." not in first and first != setting:
            assert setting in settings_for_trl_name(first.replace("_", "-"))
    assert settings_for_trl_name("seed") == []  # the same name in both: nothing to translate


def test_version_names_the_release_and_the_checkout(capsys: pytest.CaptureFixture) -> None:
    from grpolab import __version__
    from grpolab.provenance import software

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"grpolab {__version__}")
    commit = software()["commit"]
    assert (commit[:12] in line) if commit else ("commit" not in line)
