"""The engine table (``grpolab.capabilities``): the ``engine`` setting's choices, the remedies each engine runs,
its refused settings, its checkpoint folders and the check a sweep runs on each arm."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from grpolab import capabilities, remedies
from grpolab.config import TrainConfig
from grpolab.config.fields import choices
from grpolab.errors import UserError
from grpolab.metric_keys import ENGINES as METRIC_ENGINES

pytestmark = pytest.mark.fast


def test_the_engine_settings_choices_and_the_metric_table_read_the_engine_table() -> None:
    assert choices(TrainConfig())["engine"] == tuple(capabilities.ENGINES) == METRIC_ENGINES
    assert all(name == row.name for name, row in capabilities.ENGINES.items())


def test_an_engines_remedies_are_the_remedy_rows_that_name_it() -> None:
    for name, row in capabilities.ENGINES.items():
        assert row.remedies == tuple(r.suffix for r in remedies.REMEDIES if name in r.engines)
        assert all(capabilities.supports_remedy(name, s) == (s in row.remedies) for s in remedies.SUFFIXES)


@pytest.mark.parametrize("name", list(capabilities.ENGINES))
def test_each_refused_setting_is_refused_in_one_line_naming_another_engine(name: str) -> None:
    for entry in capabilities.engine(name).unsupported:
        value = {"use_vllm": True, "entropy_target": 0.3, "top_entropy_quantile": 0.2}[entry.setting]
        with pytest.raises(UserError, match=f"^{entry.setting} is not supported by engine {name} ") as error:
            TrainConfig(engine=name, **{entry.setting: value})
        assert "--engine" in str(error.value) and "\n" not in str(error.value)


def test_the_docs_table_is_the_engine_table_rendered() -> None:
    docs = Path(__file__).resolve().parents[1] / "docs" / "remedies.md"
    assert capabilities.render_markdown() in docs.read_text(encoding="utf-8")


def test_an_unknown_engine_is_named() -> None:
    with pytest.raises(UserError, match="unknown engine 'verl'; use one of grpolab, trl"):
        capabilities.engine("verl")


def test_checkpoints_are_found_by_each_engines_folder_layout(tmp_path: Path) -> None:
    assert not capabilities.has_checkpoint(tmp_path)
    for name, row in capabilities.ENGINES.items():
        run = tmp_path / name
        (run / "checkpoints" / row.checkpoints.name(3)).mkdir(parents=True)
        assert capabilities.has_checkpoint(run) and row.has_checkpoint(run)
        others = [other for other in capabilities.ENGINES.values() if other is not row]
        assert not any(other.has_checkpoint(run) for other in others)


def test_each_checkpoint_folder_is_read_by_the_engine_whose_layout_names_it(tmp_path: Path) -> None:
    for step, row in enumerate(capabilities.ENGINES.values(), start=3):
        (tmp_path / "checkpoints" / row.checkpoints.name(step)).mkdir(parents=True)
    found = capabilities.checkpoint_folders(tmp_path)
    assert {step: (row.name, path.name) for step, (row, path) in found.items()} == {
        3: ("grpolab", "step-000003"), 4: ("trl", "checkpoint-4")}
    assert found[3][0].problem(found[3][1]) == "does not match its checksums"  # an empty folder is not whole
    assert found[4][0].problem(found[4][1]).startswith("cannot be read (it has no checksums.json")


@pytest.mark.parametrize("name", list(capabilities.ENGINES))
def test_every_dotted_path_an_engine_declares_names_a_callable(name: str) -> None:
    row = capabilities.engine(name)
    paths = [row.run_class, row.checkpoint_problem, row.checkpoint_model, row.arm_check]
    if name == "trl":
        pytest.importorskip("trl")  # its run class imports TRL
    for dotted in filter(None, paths):
        module, attribute = dotted.split(":")
        assert callable(getattr(importlib.import_module(module), attribute)), dotted


def test_a_layout_names_and_reads_its_folders_oldest_first_by_number(tmp_path: Path) -> None:
    padded, plain = capabilities.CheckpointLayout("step-", 6), capabilities.CheckpointLayout("checkpoint-")
    assert (padded.name(12), plain.name(12)) == ("step-000012", "checkpoint-12")
    assert padded.step_of("step-000012") == padded.step_of("step-12") == 12
    assert [padded.step_of(name) for name in ("step-3 (copy)", "step-", "step-\u00b2", "checkpoint-3")] == [None] * 4
    for name in ("step-1000000", "step-999999", "step-x", "checkpoint-5"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-000007").write_text("a file, not a checkpoint folder")
    assert padded.folders(tmp_path) == [(999999, tmp_path / "step-999999"), (1000000, tmp_path / "step-1000000")]
    assert plain.folders(tmp_path) == [(5, tmp_path / "checkpoint-5")] and plain.folders(tmp_path / "none") == []


def test_an_arm_check_runs_only_for_an_engine_that_names_one() -> None:
    capabilities.engine("grpolab").check_arm(TrainConfig(mask_degenerate_groups=True))  # the config checks suffice
    pytest.importorskip("transformers")
    with pytest.raises(UserError, match=r"^mask_degenerate_groups True is not supported by engine trl"):
        capabilities.engine("trl").check_arm(TrainConfig(engine="trl", mask_degenerate_groups=True))
