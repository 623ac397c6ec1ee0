"""Subcommand flags (grpolab.commands.flags): derived from the config fields, with each command's own
defaults visible; `grpolab eval` and `grpolab gradients` redeclare no setting of TrainConfig."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from grpolab.commands import compare, evaluate, gradients, preflight, train
from grpolab.commands.flags import add_config_arguments, config_from_args, field_docs
from grpolab.config import CompareConfig, TrainConfig
from grpolab.config.fields import HELP_GROUPS, help_group, help_title

pytestmark = pytest.mark.fast

FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def _parser(command) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {action.dest for action in parser._actions if action.dest != "help"}


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_every_field_has_its_docstring(cls: type) -> None:
    docs = field_docs(cls)
    assert set(docs) == {f.name for f in dataclasses.fields(cls)}
    assert all(text.strip() for text in docs.values())


@pytest.mark.parametrize(("command", "own"), [(evaluate, {"json", "out", "from_samples", "against", "compare", "arms",
                                                        "resamples", "trust_run_code"}), (gradients, {"json"}),
                                             (preflight, {"json", "out", "band"})])
def test_eval_and_gradients_take_their_settings_from_train_config(command, own: set[str]) -> None:
    dests = _dests(_parser(command))
    assert dests - FIELDS == own  # every other flag is a TrainConfig field
    help_text = _parser(command).format_help()
    assert "Completion length cap; default: the task's." in " ".join(help_text.split())  # the field's docstring


def test_eval_defaults_and_its_earlier_spellings() -> None:
    parser = _parser(evaluate)
    config = config_from_args(parser.parse_args([]), TrainConfig, file_values=evaluate.EVAL_TRAIN_DEFAULTS)
    assert (config.eval_samples, config.eval_limit) == (16, None)  # eval's own defaults, not a run's 8 and 200
    assert config.replace(eval_samples=8, eval_limit=200) == TrainConfig()  # and only those
    for argv in (["--n", "4", "--limit", "3"], ["--eval-samples", "4", "--eval-limit", "3"]):
        config = config_from_args(parser.parse_args(argv), TrainConfig, file_values=evaluate.EVAL_TRAIN_DEFAULTS)
        assert (config.eval_samples, config.eval_limit) == (4, 3)
    assert "(default: 16)" in " ".join(parser.format_help().split())


def test_gradients_defaults_and_the_prompts_spelling() -> None:
    parser = _parser(gradients)
    defaults = gradients.GRADIENTS_TRAIN_DEFAULTS
    config = config_from_args(parser.parse_args([]), TrainConfig, file_values=defaults)
    assert (config.advantage, config.prompts_per_step) == ("dr_grpo", 8)
    args = parser.parse_args(["--prompts", "3", "--advantage", "sign"])
    config = config_from_args(args, TrainConfig, file_values=defaults)
    assert (config.advantage, config.prompts_per_step) == ("sign", 3)


def test_train_flags_parse_to_the_field_types() -> None:
    parser = _parser(train)
    assert FIELDS <= _dests(parser)
    args = parser.parse_args(["--no-eval-start", "--adam-betas", "0.8,0.95", "--advantage-kwargs", '{"k": 2}',
                              "--lr", "3e-4", "--eval-limit", "5"])
    config = config_from_args(args)
    assert not config.eval_start and config.adam_betas == (0.8, 0.95) and config.advantage_kwargs == {"k": 2}
    assert config.lr == 3e-4 and config.eval_limit == 5 and config.steps == TrainConfig().steps
    with pytest.raises(SystemExit):
        parser.parse_args(["--advantage-kwargs", "[1, 2]"])  # a JSON object or nothing


def test_flags_for_fields_that_do_not_exist_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="group: not fields of TrainConfig"):
        add_config_arguments(argparse.ArgumentParser(), TrainConfig, only=["group"])
    with pytest.raises(ValueError, match="steps: not fields"):  # an alias for a field the command does not take
        add_config_arguments(argparse.ArgumentParser(), TrainConfig, only=["seed"], aliases={"steps": "--n"})


@pytest.mark.parametrize(("command", "flag"), [(evaluate, "--task-options"), (train, "--task-options"),
                                               (train, "--advantage-kwargs"), (gradients, "--advantage-kwargs")])
@pytest.mark.parametrize("text", ["[1]", "3", '"text"', "null", "{oops"])
def test_a_json_flag_that_is_not_an_object_is_a_one_line_usage_error(command, flag: str, text: str,
                                                                     capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parser(command).parse_args([flag, text])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{flag[2:].replace('-', '_')} must be a JSON object such as" in last, last


@pytest.mark.parametrize("cls", [TrainConfig, CompareConfig])
def test_a_field_with_choices_gets_them_as_argparse_choices(cls: type) -> None:
    from grpolab.config.fields import choices

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, cls)
    found = choices(cls)
    by_dest = {action.dest: action for action in parser._actions}
    assert {name: tuple(by_dest[name].choices) for name in found} == found
    assert all(action.choices is None for name, action in by_dest.items() if name not in found)
    help_text = parser.format_help()
    for allowed in found.values():
        assert "{" + ",".join(allowed) + "}" in help_text  # --help lists them
    name, allowed = next(iter(found.items()))
    args = parser.parse_args([f"--{name.replace('_', '-')}", allowed[-1]])
    assert getattr(config_from_args(args, cls), name) == allowed[-1]


def test_an_invalid_choice_is_one_line_naming_the_flag_and_the_choices(capsys: pytest.CaptureFixture) -> None:
    from grpolab.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--lr-schedule", "step"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("grpolab train: error: argument --lr-schedule: invalid choice: 'step'")
    assert "'constant', 'linear', 'cosine'" in err and "see grpolab train --help" in err


def test_the_docs_give_flags_with_choices_only_values_of_the_schema() -> None:
    """A doc that writes ``--lr-schedule X`` (README, docs/) names one of the field's choices, as --help does;
    docs/reliability.md lists refused values on purpose, and an upper-case word is a placeholder (``--engine E``)."""
    import re
    from pathlib import Path

    from grpolab.config.fields import choices

    root = Path(__file__).resolve().parents[2]
    texts = [root / "README.md", *sorted(p for p in (root / "docs").glob("*.md") if p.name != "reliability.md")]
    found = {**choices(TrainConfig), **choices(CompareConfig)}
    wrong = []
    for path in texts:
        text = path.read_text(encoding="utf-8")
        for name, allowed in found.items():
            for value in re.findall(rf"--{name.replace('_', '-')}[ =]([A-Za-z0-9_:]+)", text):
                if value not in allowed and not value.isupper():
                    wrong.append(f"{path.name}: --{name.replace('_', '-')} {value}")
    assert wrong == []


def _titled_groups(parser: argparse.ArgumentParser) -> dict[str, list[argparse.Action]]:
    """Title -> options of every argument group with at least one option (argparse's own groups included)."""
    return {group.title: group._group_actions for group in parser._action_groups if group._group_actions}


@pytest.mark.parametrize(("command", "classes"), [(train, (TrainConfig,)), (compare, (CompareConfig, TrainConfig))])
def test_help_shows_every_option_in_exactly_one_group_titled_from_the_schema(command, classes) -> None:
    parser = _parser(command)
    groups = _titled_groups(parser)
    options = [action for action in parser._actions if action.option_strings]
    for action in options:
        holders = [title for title, actions in groups.items() if action in actions]
        assert len(holders) == 1, (action.option_strings, holders)
    for cls in classes:
        for f in dataclasses.fields(cls):
            (action,) = [a for a in options if a.dest == f.name]
            assert action in groups[help_title(help_group(cls, f.name))], f.name
    schema_titles = [help_title(name) for name in HELP_GROUPS]
    shown = [title for title in groups if title in schema_titles]
    assert shown == [title for title in schema_titles if title in groups]  # the schema's order
    assert set(groups) - set(shown) <= {"options", "optional arguments"}  # argparse's own: --help, --config, ...
    help_text = parser.format_help()
    positions = [help_text.index(f"\n{title}:\n") for title in shown]
    assert positions == sorted(positions)


def test_train_shows_no_sweep_group_and_compare_does() -> None:
    assert help_title("sweep") not in _titled_groups(_parser(train))
    sweep = _titled_groups(_parser(compare))[help_title("sweep")]
    assert {"--estimators", "--seeds", "--large-plan"} <= {s for a in sweep for s in a.option_strings}
    output = _titled_groups(_parser(train))[help_title("output")]
    assert {"--out", "--overwrite", "--checkpoint-every"} <= {s for a in output for s in a.option_strings}


def test_a_group_title_written_in_the_schema_is_the_title_help_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HELP_GROUPS, "loss", "estimator and loss, as the schema says")
    help_text = _parser(train).format_help()
    assert "\nloss (estimator and loss, as the schema says):\n" in help_text
