"""GSM8K and MATH-500 tasks on local copies, and each reference scoring 1.0 against its own solution.

Every test runs on the 50-row fixtures in ``tests/fixtures`` (so a fresh clone runs them) and again on the
full sets in ``shared/data`` beside the repository when that directory exists. Nothing here downloads: the
hub code path runs on local files through a patched ``datasets.load_dataset``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grpolab import verifiers
from grpolab.errors import UserError
from grpolab.tasks import get_task
from grpolab.verifiers import math_answer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FULL_SIZES = {"gsm8k/train": 7473, "gsm8k/test": 1319, "math500/test": 500}


def _repository_roots(root: Path) -> list[Path]:
    """``root``, and for a git worktree also the main checkout it belongs to (``.git`` is then a file
    ``gitdir: <main>/.git/worktrees/<name>``)."""
    roots, dot_git = [root], root / ".git"
    if dot_git.is_file() and dot_git.read_text().startswith("gitdir:"):
        gitdir = (root / dot_git.read_text().partition(":")[2].strip()).resolve()
        common = gitdir / "commondir"
        if common.is_file():
            roots.append((gitdir / common.read_text().strip()).resolve().parent)
    return roots


def shared_data() -> Path | None:
    """The full data sets: ``$GRPOLAB_SHARED_DATA`` if set, else ``shared/data`` beside the repository (or
    beside the main checkout of this worktree); None when there is none."""
    if os.environ.get("GRPOLAB_SHARED_DATA"):
        return Path(os.environ["GRPOLAB_SHARED_DATA"])
    candidates = [r.parent / "shared" / "data" for r in _repository_roots(Path(__file__).resolve().parents[2])]
    return next((c for c in candidates if c.is_dir()), None)


SHARED = shared_data()


@pytest.fixture(params=["fixture", "full"])
def data(request: pytest.FixtureRequest) -> Path:
    """The directory holding ``gsm8k/`` and ``math500/``: the in-repository fixture, then the full sets."""
    if request.param == "fixture":
        return FIXTURES
    if SHARED is None or not SHARED.is_dir():
        pytest.skip("full data not found: no shared/data beside the repository and GRPOLAB_SHARED_DATA unset")
    return SHARED


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _size(path: Path) -> int:
    return len(_rows(path))


@pytest.mark.parametrize("name", sorted(FULL_SIZES))
def test_fixtures_are_the_first_rows_of_the_full_sets(name: str) -> None:
    fixture = (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    assert 0 < len(fixture) <= 100 and (FIXTURES / name.split("/")[0] / "LICENSE").is_file()
    if SHARED is None:
        pytest.skip("full data not found")
    full = (SHARED / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(full) == FULL_SIZES[name] and full[: len(fixture)] == fixture


# ------------------------------------------------------------------------------------ self-consistency

@pytest.mark.parametrize("split", ["train", "test"])
def test_every_gsm8k_solution_scores_one(data: Path, split: str) -> None:
    task = get_task("gsm8k", path=data / "gsm8k")
    problems = task.train if split == "train" else task.test
    rows = _rows(data / "gsm8k" / f"{split}.jsonl")
    assert len(problems) == len(rows)
    failures = []
    for problem, row in zip(problems, rows, strict=True):
        strict_reward, parts = verifiers.score_with_details("gsm8k_strict", row["answer"], problem.reference)
        if strict_reward != 1.0 or verifiers.score("gsm8k", row["answer"], row["answer"]) != 1.0:
            failures.append((problem.id, problem.reference, parts))
    assert failures == []  # no exceptions: every GSM8K solution ends in a parseable "#### N"


def test_every_math500_solution_scores_one(data: Path) -> None:
    """Every answer against its own solution's last box, once through the string pre-check and once through
    math-verify itself, which never hits its time limit on them (no exceptions are needed). How long the 500
    take is reported by ``benchmarks/bench_verifiers.py``, not asserted here."""
    math_answer.warm_up()
    task = get_task("math500", path=data / "math500")
    by_id = {row["unique_id"]: row for row in _rows(data / "math500" / "test.jsonl")}
    problems = task.train + task.test
    assert len(problems) == len(by_id) == _size(data / "math500" / "test.jsonl")
    failures = []
    for problem in problems:
        solution = by_id[problem.id]["solution"]
        for precheck in (True, False):
            reward, parts = math_answer.score_details(solution, problem.reference, precheck=precheck)
            if reward != 1.0 or parts.get("timed_out"):
                failures.append((problem.id, problem.reference, precheck, parts))
    assert failures == []


# ---------------------------------------------------------------------------------------------- tasks

def test_gsm8k_task_shape(data: Path) -> None:
    task = get_task("gsm8k", path=data / "gsm8k", limit=5)
    assert (task.name, task.verifier, task.max_new_tokens) == ("gsm8k", "gsm8k", 256)
    assert len(task.train) == len(task.test) == 5
    first = task.test[0]
    assert first.id == "gsm8k/test/0" and first.reference == "18"
    assert "Janet" in first.prompt and "####" in first.prompt
    train = get_task("gsm8k", path=data / "gsm8k").train
    assert len({p.id for p in train}) == len(train) == _size(data / "gsm8k" / "train.jsonl")


def test_file_task_reads_gsm8k_like_the_gsm8k_task(data: Path) -> None:
    path = data / "gsm8k"
    task = get_task("file", path=path, prompt_column="question", reference_column="answer", verifier="gsm8k")
    builtin = get_task("gsm8k", path=path)
    sizes = (_size(path / "train.jsonl"), _size(path / "test.jsonl"))
    assert (len(task.train), len(task.test)) == (len(builtin.train), len(builtin.test)) == sizes
    assert (task.info["unparseable_references"], task.info["duplicate_prompts"]) == (0, 0)
    pairs = zip(task.test, builtin.test, strict=True)
    assert all(verifiers.score("gsm8k", mine.reference, theirs.reference) == 1.0 for mine, theirs in pairs)


def test_gsm8k_single_file_split_by_seed(data: Path) -> None:
    path = data / "gsm8k" / "test.jsonl"
    a = get_task("gsm8k", path=path, seed=1, test_fraction=0.25)
    b = get_task("gsm8k", path=path, seed=1, test_fraction=0.25)
    c = get_task("gsm8k", path=path, seed=2, test_fraction=0.25)
    assert a == b and a.test != c.test
    assert len(a.test) == round(0.25 * _size(path)) and len(a.train) + len(a.test) == _size(path)
    assert not {p.id for p in a.train} & {p.id for p in a.test}


def test_math500_task_split_by_seed(data: Path) -> None:
    path = data / "math500"
    a = get_task("math500", path=path, seed=0)
    b = get_task("math500", path=path / "test.jsonl", seed=0)
    c = get_task("math500", path=path, seed=1)
    assert (a.name, a.verifier, a.max_new_tokens) == ("math500", "math", 512)
    assert a == b and a.test != c.test
    size = _size(path / "test.jsonl")
    assert (len(a.train), len(a.test)) == (size - round(0.2 * size), round(0.2 * size))  # 400 / 100 on the full set
    assert "\\boxed{}" in a.test[0].prompt and a.test[0].id.startswith("test/")
    assert len(get_task("math500", path=path, limit=7).train) == 7


def _fake_load_dataset(data_files: dict[str, Path], cache_dir: Path):
    """A ``load_dataset`` that records its calls and reads local jsonl with the real "json" builder."""
    import datasets

    real, calls = datasets.load_dataset, []

    def load_dataset(hub_id: str, config: str | None = None, *, split: str):
        calls.append((hub_id, config, split))
        return real("json", data_files={split: str(data_files[split])}, split=split, cache_dir=str(cache_dir))

    return load_dataset, calls


def test_hub_path_on_local_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import datasets

    for name, source in (("train", FIXTURES / "gsm8k" / "train.jsonl"), ("test", FIXTURES / "gsm8k" / "test.jsonl")):
        (tmp_path / f"{name}.jsonl").write_text("".join(source.open().readlines()[:20]))
    files = {s: tmp_path / f"{s}.jsonl" for s in ("train", "test")}
    load_dataset, calls = _fake_load_dataset(files, tmp_path / "cache")
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr("grpolab.tasks._loading.hub_unavailable", lambda: None)  # as if the hub answered
    task = get_task("gsm8k", limit=3)
    assert calls == [("openai/gsm8k", "main", "train"), ("openai/gsm8k", "main", "test")]
    assert [p.reference for p in task.test] == ["18", "3", "70000"]
    assert get_task("gsm8k", path=tmp_path, limit=3) == task

    monkeypatch.undo()
    load_dataset, calls = _fake_load_dataset({"test": FIXTURES / "math500" / "test.jsonl"}, tmp_path / "cache")
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr("grpolab.tasks._loading.hub_unavailable", lambda: None)
    assert get_task("math500") == get_task("math500", path=FIXTURES / "math500")
    assert calls == [("HuggingFaceH4/MATH-500", None, "test")]


def test_hub_failure_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr("grpolab.tasks._loading.hub_unavailable", lambda: None)  # reachable, then failing
    with pytest.raises(UserError, match=r"could not load 'openai/gsm8k'.*local jsonl path"):
        get_task("gsm8k")


# ------------------------------------------------------------------------------------------ bad input

def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"nope\.jsonl does not exist; pass the path"):
        get_task("gsm8k", path=tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match=r"test\.jsonl does not exist"):
        get_task("math500", path=tmp_path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"bad\.jsonl:3: not valid JSON"),
        ('{"question": "q"}', r"bad\.jsonl:3: field 'answer' is missing"),
        ('{"question": "q", "answer": 5}', r"bad\.jsonl:3: field 'answer' is not a string \(int\)"),
        ("[1, 2]", r"bad\.jsonl:3: a JSON list, where a JSON object"),
    ],
)
def test_malformed_row_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    good = json.dumps({"question": "q", "answer": "x\n#### 1"})
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(UserError, match=message):
        get_task("gsm8k", path=path)


def test_gsm8k_answer_without_hashes(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "just 5"}) + "\n")
    with pytest.raises(UserError, match=r"no '#### <number>' line"):
        get_task("gsm8k", path=path, test_fraction=0.5)
