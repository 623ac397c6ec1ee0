"""The task registry: ``@register_task``, dotted-path builders, the 20-line example task, and the report's
Data section built from ``Task.summary()``."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from grpolab import tasks
from grpolab.errors import UserError
from grpolab.report.data_section import data_sections
from grpolab.tasks import Problem, Task, get_task, register_task

pytestmark = pytest.mark.fast

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _tiny(name: str = "tiny") -> Task:
    return Task(name=name, train=(Problem("a", "1+1=", "2"),), test=(Problem("b", "2+2=", "4"),), verifier="exact")


def test_register_task_builds_by_name_and_rejects_duplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "_REGISTERED", {})

    @register_task("tiny")
    def make(*, size: int = 1) -> Task:
        return _tiny()

    assert "tiny" in tasks.available() and get_task("tiny", size=2).train[0].prompt == "1+1="
    with pytest.raises(UserError, match=r"task 'tiny' has no option.* colour"):
        get_task("tiny", colour="red")
    with pytest.raises(ValueError, match="already registered"):
        register_task("tiny")(make)
    with pytest.raises(ValueError, match="already registered"):
        register_task("arith")(make)


def test_builder_must_return_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "_REGISTERED", {})
    register_task("broken")(lambda: [Problem("a", "p", "r")])
    with pytest.raises(UserError, match=r"returned a list, not a grpolab.tasks.Task"):
        get_task("broken")


def test_dotted_path_builds_the_example_task(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "_REGISTERED", {})
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "custom_task", raising=False)
    task = get_task("custom_task:make_task", low=10, high=19)
    assert [p.prompt for p in task.test] == ["10*10=", "15*15="] and task.test[1].reference == "225"
    assert len(task.train) == 8 and "squares" in tasks.available()  # importing it registered the name
    assert get_task("squares").test[-1].prompt == "95*95="
    assert len((EXAMPLES / "custom_task.py").read_text().splitlines()) <= 20
    with pytest.raises(UserError, match="cannot import module 'no_such_module_xyz'"):
        get_task("no_such_module_xyz:make")
    with pytest.raises(UserError, match="is not a function of module 'custom_task'"):
        get_task("custom_task:nothing")
    with pytest.raises(UserError, match=r"unknown task 'nothing'.*pkg.module:builder"):
        get_task("nothing")


def test_report_data_section_from_a_task_summary() -> None:
    summary = {**_tiny().summary(), "source": "qa.jsonl", "prompt_column": "question", "reference_column": "answer",
               "rows": {"all": 50}, "test_split": "seeded hash", "empty_prompts": 1, "duplicate_prompts": 2,
               "unparseable_references": 3, "unparseable_example": "all/4: 'x'"}
    (section,) = data_sections({"task": summary})
    assert "qa.jsonl" in " ".join(section.paragraphs)
    table = section.tables[0][1]
    assert table.to_dict("records") == [{"split": "source: all", "rows": 50}, {"split": "task: train", "rows": 1},
                                        {"split": "task: validation", "rows": 0}, {"split": "task: test", "rows": 1}]
    assert any("cannot parse, left out rather than scored 0: 3 (e.g. all/4: 'x')" in b for b in section.bullets)
    assert data_sections({"compare": {}}) == []
    (plain,) = data_sections({"task": _tiny().summary()})
    assert plain.bullets == [] and isinstance(plain.tables[0][1], pd.DataFrame)
