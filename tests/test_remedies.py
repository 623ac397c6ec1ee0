"""The remedy table (``grpolab.remedies``): every row names a real setting, metric and trainer hook; every reader
reads it; and each remedy, switched on, acts in a short run of the embedded model (its metric moves) while the
same run without it logs no such metric. A remedy whose trainer code is missing fails here, not silently as the
plain estimator."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from grpolab import advantages, capabilities, remedies
from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.metric_keys import lookup
from grpolab.sweep.plan import parse_estimator, remedy_settings

pytestmark = pytest.mark.fast

DOCS = Path(__file__).resolve().parents[1] / "docs" / "remedies.md"
FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
IDS = [remedy.suffix for remedy in remedies.REMEDIES]


@pytest.mark.parametrize("remedy", remedies.REMEDIES, ids=IDS)
def test_each_row_names_a_setting_a_metric_and_a_hook_that_exist(remedy: remedies.Remedy) -> None:
    assert FIELDS[remedy.setting].default is False and all(option in FIELDS for option in remedy.options)
    assert lookup(remedy.metric) is not None, remedy.metric  # a registered metric key
    module, attribute = remedy.hook.split(":")
    target = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    assert callable(target)
    assert set(remedy.engines) <= set(capabilities.ENGINES) and remedy.source and remedy.what
    lacking = set(capabilities.ENGINES) - set(remedy.engines)
    assert lacking <= set(remedy.engine_refusals), "say why each other engine cannot run it"


def test_the_arm_parser_and_the_sweep_read_the_table() -> None:
    assert advantages.REMEDY_SUFFIXES == remedies.SUFFIXES == {r.suffix: r.setting for r in remedies.REMEDIES}
    arm = "dr_grpo" + "".join(IDS)
    assert advantages.parse_arm(arm) == ("dr_grpo", tuple(sorted(IDS)))
    settings = remedy_settings(TrainConfig(), parse_estimator(arm)[1])
    assert settings == {r.setting: True for r in remedies.REMEDIES}


def test_an_unknown_remedy_suffix_is_refused_in_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UserError) as error:
        parse_estimator("dr_grpo+fallback")
    message = str(error.value)
    assert "\n" not in message and "'dr_grpo+fallback'" in message
    assert all(suffix in message for suffix in IDS)


def test_an_arm_naming_a_remedy_twice_is_refused_and_spellings_of_one_arm_are_one() -> None:
    with pytest.raises(UserError, match=r"'sign\+dynamic\+dynamic' names the remedy \+dynamic twice"):
        parse_estimator("sign+dynamic+dynamic")
    with pytest.raises(ValueError, match=r"names the remedy \+mask twice"):
        advantages.split_remedies("dr_grpo+mask+dynamic+mask")
    assert remedies.canonical_arm("dr_grpo+mask+dynamic") == remedies.canonical_arm("dr_grpo+dynamic+mask")
    assert remedies.canonical_arm("dr_grpo+mask") != remedies.canonical_arm("dr_grpo+dynamic")


def test_a_duplicate_suffix_or_setting_is_refused() -> None:
    mask = remedies.by_suffix("+mask")
    with pytest.raises(ValueError, match="already taken"):
        remedies._check_table((mask, dataclasses.replace(mask, suffix="+other")))
    with pytest.raises(ValueError, match="one '\\+name'"):
        remedies._check_table((dataclasses.replace(mask, suffix="mask"),))


def test_a_remedys_refusals_are_checked_with_the_config() -> None:
    with pytest.raises(UserError, match=r"^dynamic_sampling filters groups by outcome reward"):
        TrainConfig(dynamic_sampling=True, reward_granularity="token", advantage="grpo")


def test_the_trl_engine_refuses_each_remedy_it_cannot_run_with_the_rows_reason() -> None:
    from grpolab.train.trl_engine.arguments import REFUSED

    for remedy in remedies.REMEDIES:
        if "trl" not in remedy.engines:
            assert REFUSED[remedy.setting] == remedy.engine_refusals["trl"]
            assert all(REFUSED[option] == f"it only applies to {remedy.name}" for option in remedy.options)


def test_the_docs_table_is_the_registry_rendered() -> None:
    assert remedies.render_markdown() in DOCS.read_text(encoding="utf-8")


# ---------------------------------------------------------------- each remedy acts

RUN = dict(task="arith", model="embedded-arith", task_limit=4, prompts_per_step=2, group_size=2, steps=4,
           eval_limit=4, eval_samples=0, eval_start=False, checkpoint_every=0, progress=False, threads=1, lr=1e-3,
           advantage="dr_grpo", seed=1)


class _PhasedVerifier:
    """Step 1: every group has one right and one wrong completion (G = 2); later steps: every completion wrong,
    so every group is degenerate: what each remedy exists to act on."""

    def __init__(self) -> None:
        self.mixed, self.calls = True, 0

    def __call__(self, completion: str, reference: str) -> float:
        self.calls += 1
        return float(self.mixed and self.calls % 2 == 0)


def _metrics(tmp_path: Path, **settings: object) -> list[dict[str, float]]:
    """The metrics of the ``RUN``'s steps under ``_PhasedVerifier``, with ``settings`` changed."""
    from grpolab.train.trainer import Trainer

    trainer = Trainer(TrainConfig(**{**RUN, **settings}), tmp_path / "run")
    verifier = trainer.verifier = _PhasedVerifier()
    rows = []
    try:
        for step in range(1, RUN["steps"] + 1):
            rows.append(trainer.step(step))
            verifier.mixed = False
    finally:
        trainer.shell.release()
    return rows


@pytest.mark.parametrize("remedy", remedies.REMEDIES, ids=IDS)
def test_each_remedy_acts_in_a_short_run_and_logs_its_metric(remedy: remedies.Remedy, tmp_path: Path) -> None:
    rows = _metrics(tmp_path, **{remedy.setting: True})
    assert all(remedy.metric in row for row in rows), f"{remedy.hook} did not run"
    assert sum(row[remedy.metric] for row in rows) > 0, f"{remedy.suffix} never acted"


def test_without_a_remedy_no_remedy_metric_is_logged(tmp_path: Path) -> None:
    rows = _metrics(tmp_path)
    assert not {remedy.metric for remedy in remedies.REMEDIES} & {key for row in rows for key in row}


def test_a_comparison_lists_a_remedy_a_mix_and_avspo_as_arms() -> None:
    """The comma-separated --estimators carries ``+varfilter``, a ``mix-A-B-L`` (with a remedy) and ``avspo``, and
    each arm's runs get its estimator and remedy settings."""
    from grpolab.config import CompareConfig
    from grpolab.sweep.plan import Cell, plan_cells, run_config

    arms = CompareConfig(estimators="dr_grpo+varfilter, mix-sign-dr_grpo-0.5+mask,avspo").estimator_list
    assert arms == ["dr_grpo+varfilter", "mix-sign-dr_grpo-0.5+mask", "avspo"]
    cells = plan_cells(arms, [2])
    configs = [run_config(TrainConfig(), cell, seed=0, lr=1e-3) for cell in cells]
    assert [(c.advantage, c.variance_filter, c.mask_degenerate_groups) for c in configs] == [
        ("dr_grpo", True, False), ("mix-sign-dr_grpo-0.5", False, True), ("avspo", False, False)]
    assert cells[1] == Cell(cells[1].variant, "mix-sign-dr_grpo-0.5+mask", 2)
    with pytest.raises(UserError, match=r"lambda must be a number in \[0, 1\].* in --estimators$"):
        plan_cells(["mix-sign-dr_grpo-2"], [2])


def test_the_trl_engine_runs_avspo_and_a_mix_and_refuses_the_variance_filter_in_one_line() -> None:
    """grpolab's estimator replaces TRL's advantages, so TRL runs every estimator with one advantage per completion;
    the reward-variance filter would drop groups from TRL's batch, which TRL has no form for."""
    from grpolab.train.trl_engine.arguments import check_supported

    for name in ("avspo", "mix-sign-dr_grpo-0.5"):
        check_supported(TrainConfig(engine="trl", advantage=name))
    for settings in ({"variance_filter": True}, {"variance_filter_p": 0.5}):
        with pytest.raises(UserError, match=r"is not supported by engine trl \(") as error:
            check_supported(TrainConfig(engine="trl", **settings))
        assert "\n" not in str(error.value) and next(iter(settings)) in str(error.value)
