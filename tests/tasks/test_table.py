"""The ``file`` task: every kind of source, its splits, the rows it leaves out, and its errors.

Nothing here downloads: the hub-id path runs on local Parquet files through a patched
``datasets.load_dataset`` that hands them to the real ``datasets`` Parquet loader.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

from grpolab.config import TrainConfig
from grpolab.errors import UserError
from grpolab.tasks import get_task
from grpolab.tasks.table import TaskDataWarning
from grpolab.train.lifecycle import load_task_for

pytestmark = pytest.mark.fast


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _qa(count: int, start: int = 0) -> list[dict]:
    return [{"question": f"{n}+1=", "answer": str(n + 1)} for n in range(start, start + count)]


def _file_task(data, **options):
    options = {"prompt_column": "question", "reference_column": "answer", **options}
    with warnings.catch_warnings():
        warnings.simplefilter("error", TaskDataWarning)  # clean data must not warn
        return get_task("file", path=data, **options)


def test_single_file_is_cut_by_a_seeded_prompt_hash(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "qa.jsonl", _qa(200))
    task = _file_task(path)
    assert task.name == "file" and task.verifier == "exact" and task.validation == ()
    assert len(task.train) + len(task.test) == 200
    assert 20 <= len(task.test) <= 60  # about test_fraction 0.2 of 200
    assert not {p.prompt for p in task.train} & {p.prompt for p in task.test}
    by_id = {p.id: p for p in task.train + task.test}
    assert by_id["all/7"].prompt == "7+1=" and by_id["all/7"].reference == "8"
    assert _file_task(path).test == task.test  # deterministic
    assert _file_task(path, seed=1).test != task.test
    assert [p.id for p in _file_task(path, template="Q: {prompt}").test] == [p.id for p in task.test]
    assert task.info["rows"] == {"all": 200} and task.info["source"] == str(path)
    assert task.summary()["problems"] == {"train": len(task.train), "validation": 0, "test": len(task.test)}


@pytest.mark.parametrize("suffix", ["jsonl", "json"])
def test_a_byte_order_mark_is_no_content(tmp_path: Path, suffix: str) -> None:
    """Some Windows editors open a UTF-8 file with a byte-order mark; the rows are the same as without it (as for
    CSV, read as utf-8-sig)."""
    rows = _qa(60)
    text = "".join(json.dumps(row) + "\n" for row in rows) if suffix == "jsonl" else json.dumps(rows)
    plain, marked = tmp_path / f"plain.{suffix}", tmp_path / f"marked.{suffix}"
    plain.write_text(text, encoding="utf-8")
    marked.write_text(text, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert _file_task(marked).train == _file_task(plain).train and _file_task(marked).test == _file_task(plain).test


def test_folder_with_own_splits_mixed_formats(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "d" / "train.jsonl", _qa(10))
    pd.DataFrame({"question": ["100+1=", "007"], "answer": ["101", "007"]}).to_csv(tmp_path / "d" / "test.csv",
                                                                                  index=False)
    pd.DataFrame({"question": ["200+1="], "answer": [201]}).to_parquet(tmp_path / "d" / "dev.parquet")
    task = _file_task(tmp_path / "d")
    assert [p.id for p in task.train] == [f"train/{i}" for i in range(10)]
    assert [(p.prompt, p.reference) for p in task.test] == [("100+1=", "101"), ("007", "007")]  # CSV stays text
    assert [(p.prompt, p.reference) for p in task.validation] == [("200+1=", "201")]  # dev -> validation
    assert task.info["rows"] == {"train": 10, "test": 2, "validation": 1}


def test_hub_layout_folder_and_save_to_disk_folder(tmp_path: Path) -> None:
    import datasets

    (tmp_path / "hub" / "data").mkdir(parents=True)
    pd.DataFrame(_qa(6)).to_parquet(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet")
    pd.DataFrame(_qa(3, 50)).to_parquet(tmp_path / "hub" / "data" / "test-00000-of-00001.parquet")
    task = _file_task(tmp_path / "hub")
    assert (len(task.train), len(task.test)) == (6, 3)
    saved = datasets.DatasetDict({"train": datasets.Dataset.from_list(_qa(5)),
                                  "test": datasets.Dataset.from_list(_qa(2, 70))})
    saved.save_to_disk(str(tmp_path / "saved"))
    task = _file_task(tmp_path / "saved")
    assert [p.prompt for p in task.test] == ["70+1=", "71+1="] and len(task.train) == 5
    single = tmp_path / "single"
    datasets.Dataset.from_list(_qa(20)).save_to_disk(str(single))  # one Dataset: state.json + dataset_info.json
    assert len(_file_task(single).train) + len(_file_task(single).test) == 20


def test_an_unrelated_state_json_does_not_make_a_folder_a_datasets_folder(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "d" / "train.jsonl", _qa(10))
    _write_jsonl(tmp_path / "d" / "test.jsonl", _qa(3, 50))
    (tmp_path / "d" / "state.json").write_text('{"step": 3}')  # e.g. a trainer's state, not datasets'
    task = _file_task(tmp_path / "d")
    assert (len(task.train), len(task.test)) == (10, 3)
    (tmp_path / "d" / "dataset_info.json").write_text("{}")  # both of datasets' file names, but not its files
    with pytest.raises(UserError, match=r"written by datasets' save_to_disk .* datasets cannot load it") as caught:
        _file_task(tmp_path / "d")
    assert "\n" not in str(caught.value) and "disk has space" not in str(caught.value)


def test_hub_id_is_loaded_with_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    files = {"train": str(tmp_path / "train.parquet"), "validation": str(tmp_path / "valid.parquet")}
    pd.DataFrame(_qa(40)).to_parquet(files["train"])
    pd.DataFrame(_qa(4, 100)).to_parquet(files["validation"])
    real_load = datasets.load_dataset
    calls = []

    def offline_load(name, config=None, **kwargs):
        calls.append((name, config))
        return real_load("parquet", data_files=files, cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", offline_load)
    monkeypatch.setattr("grpolab.tasks._loading.hub_unavailable", lambda: None)  # the hub answers, as online
    task = _file_task("someone/qa", hub_config="main")
    assert calls == [("someone/qa", "main")]
    assert len(task.validation) == 4 and len(task.train) + len(task.test) == 40
    assert task.info["source"] == "someone/qa"


def test_python_objects_dataframe_and_dataset() -> None:
    import datasets

    frame = pd.DataFrame({"q": ["1+1=", "2+2=", "3+3=", "4+4=", "5+5=", "6+6="], "a": [2, 4, 6, 8, 10, 12]})
    task = get_task("file", path=frame, prompt_column="q", reference_column="a", test_fraction=0.5)
    assert sorted(p.reference for p in task.train + task.test) == ["10", "12", "2", "4", "6", "8"]
    task = get_task("file", path=datasets.Dataset.from_pandas(frame), prompt_column="q", reference_column="a",
                    test_fraction=0.5, template="Q: {prompt}\nA:")
    assert all(p.prompt.startswith("Q: ") and p.prompt.endswith("=\nA:") for p in task.train + task.test)


def test_a_whole_float_reference_is_its_integer_text(tmp_path: Path) -> None:
    """An integer column with a gap is stored as floats (18.0); its references must read "18", which an exact
    verifier compares with the completion "18", while a fraction keeps its digits."""
    frame = pd.DataFrame({"q": [f"{n}+{n}=" for n in range(6)], "a": [0, 2, 4, None, 8, 2.5]})
    assert frame["a"].dtype == float
    frame.to_parquet(tmp_path / "train.parquet")
    for data in (frame, tmp_path / "train.parquet"):
        task = get_task("file", path=data, prompt_column="q", reference_column="a", verifier="exact",
                        test_fraction=0.5)
        assert sorted(p.reference for p in task.train + task.test) == ["0", "2", "2.5", "4", "8"]


def test_missing_column_names_the_columns_that_exist(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "qa.jsonl", _qa(5))
    with pytest.raises(UserError, match=r"column 'questio' is not in .*qa.jsonl; its columns are question, answer; "
                                        r"pass --prompt-column"):
        get_task("file", path=path, prompt_column="questio", reference_column="answer")
    with pytest.raises(UserError, match=r"column 'solution' .* pass --reference-column"):
        get_task("file", path=path, prompt_column="question", reference_column="solution")


def test_empty_and_duplicate_prompts_are_left_out_and_counted(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "d" / "train.jsonl",
                 [*_qa(5), {"question": "  ", "answer": "1"}, {"answer": "2"}, {"question": "1+1=", "answer": "2"},
                  {"question": "9+1=", "answer": "10"}])
    _write_jsonl(tmp_path / "d" / "test.jsonl", [{"question": "9+1=", "answer": "10"}])
    with pytest.warns(TaskDataWarning, match=r"left out 2 empty prompt\(s\), 2 duplicate prompt\(s\) and 0 ref"):
        task = get_task("file", path=tmp_path / "d", prompt_column="question", reference_column="answer")
    assert [p.prompt for p in task.train] == [f"{n}+1=" for n in range(5)]  # 9+1= is kept in test only
    assert [p.prompt for p in task.test] == ["9+1="]
    assert (task.info["empty_prompts"], task.info["duplicate_prompts"]) == (2, 2)


def test_references_the_verifier_cannot_parse_are_left_out_and_counted(tmp_path: Path) -> None:
    rows = [*_qa(30), {"question": "x=", "answer": "no number"}, {"question": "y=", "answer": ""},
            {"question": "z=", "answer": "1 or 2"}]
    path = _write_jsonl(tmp_path / "qa.jsonl", rows)
    with pytest.warns(TaskDataWarning, match=r"3 reference\(s\) the verifier 'gsm8k' cannot parse \(e.g. all/30: "
                                             r"'no number'\)"):
        task = get_task("file", path=path, prompt_column="question", reference_column="answer", verifier="gsm8k")
    assert task.info["unparseable_references"] == 3
    assert len(task.train) + len(task.test) == 30
    assert all(p.prompt not in ("x=", "y=", "z=") for p in task.train + task.test)


def test_no_parseable_reference_is_an_error(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "qa.jsonl", [{"question": f"q{n}", "answer": "none"} for n in range(20)])
    with pytest.raises(UserError, match=r"no train problems left .* 20 reference"), pytest.warns(TaskDataWarning):
        get_task("file", path=path, prompt_column="question", reference_column="answer", verifier="gsm8k")


def test_a_user_verifier_that_raises_marks_references_unparseable(tmp_path: Path, monkeypatch) -> None:
    # a real module file: user verifiers run in a worker process that imports them from sys.path
    (tmp_path / "filetask_user_verifier.py").write_text(
        "def score(completion, reference):\n    return float(int(reference) == int(completion))  # raises on 'abc'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = _write_jsonl(tmp_path / "qa.jsonl", [*_qa(20), {"question": "a=", "answer": "abc"}])
    with pytest.warns(TaskDataWarning, match=r"1 reference\(s\)"):
        task = get_task("file", path=path, prompt_column="question", reference_column="answer",
                        verifier="filetask_user_verifier:score")
    assert task.verifier == "filetask_user_verifier:score" and len(task.train) + len(task.test) == 20


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("qa.jsonl", '{"question": "1", "answer": "1"}\n{bad\n', r"qa.jsonl:2: not valid JSON"),
        ("qa.jsonl", '{"question": ["a", "b"], "answer": "1"}\n', r"column 'question', row 0 .* holds a list"),
        ("qa.txt", "question,answer\n", r"unknown file type '.txt'"),
        ("qa.json", '[{"question": "1", "answer": "1"}, 3]', r"item 1 of the JSON array is not an object"),
        ("qa.csv", "", r"cannot read it as CSV"),
        ("qa.parquet", "not parquet", r"cannot read it as Parquet"),
    ],
)
def test_bad_files_give_one_clear_line(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message) as caught:
        get_task("file", path=path, prompt_column="question", reference_column="answer")
    assert "\n" not in str(caught.value)


def test_bad_locations_and_options(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"data file .*nope.jsonl does not exist"):
        get_task("file", path=tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="needs data"):
        get_task("file")
    _write_jsonl(tmp_path / "d" / "a.jsonl", _qa(3))
    with pytest.raises(UserError, match="holds no train/test files"):
        get_task("file", path=tmp_path / "d")
    path = _write_jsonl(tmp_path / "qa.jsonl", _qa(20))
    with pytest.raises(UserError, match="has no \\{prompt\\}"):
        get_task("file", path=path, prompt_column="question", reference_column="answer", template="Q:")
    with pytest.raises(UserError, match="test_fraction"):
        get_task("file", path=path, prompt_column="question", reference_column="answer", test_fraction=1.0)


def test_several_splits_without_train_is_an_error(tmp_path: Path) -> None:
    import datasets

    data = datasets.DatasetDict({"a": datasets.Dataset.from_list(_qa(3)), "b": datasets.Dataset.from_list(_qa(3))})
    with pytest.raises(UserError, match="has the splits a, b; name them train and test"):
        get_task("file", path=data, prompt_column="question", reference_column="answer")


def test_config_flags_reach_the_file_task(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "qa.jsonl", [{"q": f"{n}+1=", "a": f"#### {n + 1}"} for n in range(30)])
    config = TrainConfig(task="file", data=str(path), prompt_column="q", reference_column="a", verifier="gsm8k",
                         task_limit=3, task_options={"max_new_tokens": 12, "template": "{prompt} ",
                                                     "use_chat_template": False})
    task = load_task_for(config)
    assert task.verifier == "gsm8k" and task.max_new_tokens == 12 and task.use_chat_template is False
    assert len(task.train) == 3 and len(task.test) == 3 and task.train[0].prompt.endswith("+1= ")
    with pytest.raises(UserError, match="--prompt-column and --reference-column are for --task file"):
        load_task_for(TrainConfig(task="arith", prompt_column="q"))
    task = load_task_for(TrainConfig(task="file", data=str(path), prompt_column="q", reference_column="a",
                                     eval_split="validation"))
    assert task.validation and task.verifier == "exact"


def test_a_50_mb_line_is_refused_naming_its_line_after_reading_16_mib(tmp_path: Path) -> None:
    # was: the whole line read, then the 50 MB prompt tokenized whole: 11.2 GB and a Rust abort (exit 134)
    import tracemalloc

    path = tmp_path / "qa.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        handle.write(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
        handle.write(json.dumps({"question": "ab " * 16_700_000, "answer": "2"}) + "\n")  # 50 MB
    tracemalloc.start()
    try:
        with pytest.raises(UserError) as caught:
            get_task("file", path=path, prompt_column="question", reference_column="answer")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(caught.value).startswith(f"{path}:2: a line longer than 16 MiB") and "\n" not in str(caught.value)
    assert peak < 40 << 20  # one 16 MiB read and its decoding at most, not the 50 MB line


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_prompt_cell_over_16_mib_is_refused_naming_its_row(tmp_path: Path, suffix: str) -> None:
    frame = pd.DataFrame({"question": ["1+1=", "x" * (17 << 20)], "answer": ["2", "3"]})
    path = tmp_path / f"qa{suffix}"
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    with pytest.raises(UserError, match=r"column 'question', row 1 of the all data of .*qa\.\w+, holds a prompt of "
                                        r"17,825,792 characters.*shorten the row or remove it") as caught:
        get_task("file", path=path, prompt_column="question", reference_column="answer")
    assert "\n" not in str(caught.value)


def test_a_folder_whose_only_split_is_test_is_trained_on_with_a_warning(tmp_path: Path) -> None:
    """A benchmark's held-out split given as the only data: it is cut by the seeded hash as a single file is, and a
    warning says that the run trains on part of the test split."""
    _write_jsonl(tmp_path / "bench" / "test.jsonl", _qa(100))
    with pytest.warns(TaskDataWarning, match="only split is 'test', so the run trains on part of it"):
        task = get_task("file", path=tmp_path / "bench", prompt_column="question", reference_column="answer")
    assert len(task.train) + len(task.test) == 100 and not {p.id for p in task.train} & {p.id for p in task.test}
    _write_jsonl(tmp_path / "bench" / "train.jsonl", _qa(50, start=100))
    _file_task(tmp_path / "bench")  # with a train split: no warning (_file_task turns one into an error)
