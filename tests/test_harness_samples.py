"""Reading harness per-sample files back and re-scoring them (``grpolab.harness_samples``, ``grpolab eval
--from-samples``): the committed lm-eval fixture, a lighteval details parquet made here with the same responses,
and every kind of bad input, each refused in one line that names the file and the line or row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpolab.cli import main
from grpolab.diagnostics.majority import Votes
from grpolab.diagnostics.sampled import sampled_metrics
from grpolab.errors import UserError
from grpolab.harness_samples import find_sample_files, read_samples, rescore, verifier_for

pytestmark = pytest.mark.fast

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "lm_eval" / "samples_gsm8k_2026-11-27T10-00-00.000000.jsonl"
LIGHTEVAL_NAME = "details_gsm8k|0_2026-11-27T10-00-00.000000.parquet"
# The fixture's responses as designed (tests/fixtures/lm_eval/make_samples.py): per document, the correct
# count and the classes of the wrong answers; "#### 20.0" and "$18" are right for grpolab's decimal comparison.
EXPECTED_VOTES = [Votes(4), Votes(2, (2,)), Votes(1, (2,), 1), Votes(0, (1, 1, 1), 1), Votes(3, (1,)),
                  Votes(1, (1, 1, 1)), Votes(0, (4,)), Votes(2, (1, 1))]
EPS = np.finfo(np.float64).eps


def _fixture_lines() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def _write_lm_eval(tmp_path: Path, lines: list[str], name: str = FIXTURE.name) -> Path:
    path = tmp_path / name
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _lighteval_rows() -> list[dict]:
    """The fixture's documents as lighteval 0.13 writes them: asdict(Detail) with doc, metric, model_response."""
    rows = []
    for line in _fixture_lines()[::2]:
        doc = {"query": f"Question: {line['doc']['question']}\nAnswer:", "choices": [f" {line['doc']['answer']}"],
               "gold_index": 0, "instruction": None, "id": str(line["doc_id"]), "task_name": "gsm8k|0",
               "num_samples": 4, "generation_size": 256, "stop_sequences": ["Question:"]}
        response = {"input": doc["query"], "text": line["resps"][0], "text_post_processed": None,
                    "input_tokens": [1, 2], "output_tokens": [[3]] * 4, "truncated_tokens_count": 0}
        rows.append({"doc": doc, "metric": {"pass@k:k=1&n=4": 0.0}, "model_response": response})
    return rows


def _write_lighteval(tmp_path: Path, rows: list[dict], name: str = LIGHTEVAL_NAME) -> Path:
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_each_document_is_read_once_with_every_repeat() -> None:
    samples = read_samples(FIXTURE)
    assert samples.source == "lm-eval" and samples.task == "gsm8k"
    assert samples.records == 16 and samples.prompts == 8 and samples.doc_ids == [str(i) for i in range(8)]
    assert all(len(r) == 4 for r in samples.responses) and samples.response_count == 32
    assert samples.references[0].endswith("#### 18")


def test_rescoring_counts_every_repeat_not_the_harness_first_response_metric() -> None:
    score = rescore(read_samples(FIXTURE))
    assert score.verifier == "gsm8k" and score.unscorable == 0
    assert score.correct.tolist() == [v.correct for v in EXPECTED_VOTES] and score.votes == EXPECTED_VOTES
    expected = sampled_metrics(np.full(8, 4), [v.correct for v in EXPECTED_VOTES], EXPECTED_VOTES)
    assert score.metrics.values == expected.values
    tol = 64 * EPS
    assert score.metrics.values["avg@n"].mean == pytest.approx(13 / 32, abs=tol)
    assert score.metrics.values["pass@4"].mean == pytest.approx(6 / 8, abs=tol)
    assert score.metrics.values["pass^4"].mean == pytest.approx(1 / 8, abs=tol)
    assert score.metrics.values["maj@4"].mean == pytest.approx((1 + 0.5 + 1 + 0.25 + 1) / 8, abs=tol)
    lm_eval_first = np.mean([line["exact_match"] for line in _fixture_lines() if line["filter"] == "strict-match"])
    assert lm_eval_first == 5 / 8 != score.metrics.values["avg@n"].mean  # lm-eval scored the first repeat only


def test_a_lighteval_details_file_gives_the_same_numbers_as_lm_eval_for_the_same_responses(tmp_path: Path) -> None:
    path = _write_lighteval(tmp_path, _lighteval_rows())
    samples = read_samples(path)
    assert samples.source == "lighteval" and samples.task == "gsm8k|0" and samples.records == 8
    score = rescore(samples)
    assert score.verifier == "gsm8k" and score.metrics.values == rescore(read_samples(FIXTURE)).metrics.values


def test_a_lighteval_row_without_an_id_cannot_take_another_rows_id(tmp_path: Path) -> None:
    """Was: an empty doc.id became the row number, "0", beside a real "0": two documents of one id, which
    ``--against`` pairs by."""
    rows = _lighteval_rows()[:3]
    rows[1]["doc"]["id"] = ""
    samples = read_samples(_write_lighteval(tmp_path, rows))
    assert samples.doc_ids == ["0", "row 2", "2"]


def test_a_directory_is_searched_for_both_kinds(tmp_path: Path) -> None:
    nested = tmp_path / "out" / "model" / "2026"
    nested.mkdir(parents=True)
    shutil.copy(FIXTURE, tmp_path / "out" / FIXTURE.name)
    _write_lighteval(nested, _lighteval_rows())
    found = find_sample_files([tmp_path / "out"])
    assert found == [nested / LIGHTEVAL_NAME, tmp_path / "out" / FIXTURE.name]  # by path, recursively


@pytest.mark.parametrize(("task", "verifier"), [("gsm8k", "gsm8k"), ("gsm8k_cot_self_consistency", "gsm8k"),
                                                ("minerva_math_algebra", "math_final"), ("math_500|0", "math"),
                                                ("lighteval|aime24|0", "math_final"),
                                                ("hendrycks_math", "math_final")])
def test_task_names_find_their_verifier(task: str, verifier: str) -> None:
    assert verifier_for(task) == verifier and verifier_for(task, "exact") == "exact"


@pytest.mark.parametrize(("task", "response"), [
    ("hendrycks_math_algebra", " $24$"),  # the forms each task's prompt asks for, which its process_results reads
    ("aime24", " 24"),
    ("minerva_math_algebra", "Final Answer: The final answer is $24$. I hope it is correct."),
])
def test_the_math_family_of_lm_eval_is_scored_in_the_answer_form_it_asks_for(task: str, response: str,
                                                                             tmp_path: Path) -> None:
    """lm-eval scores these responses 1 (its hendrycks_math, aime and minerva_math utils); under the boxed-only
    ``math`` verifier they scored 0 with no warning. A wrong answer in the same form still scores 0."""
    lines = [json.dumps({"doc_id": 0, "doc": {}, "target": "24", "arguments": {}, "filter": "none",
                         "resps": [[response, response.replace("24", "25")]], "filtered_resps": [response]}) + "\n"]
    path = _write_lm_eval(tmp_path, lines, name=f"samples_{task}_2026-11-27T10-00-00.000000.jsonl")
    scored = rescore(read_samples(path))
    assert scored.verifier == "math_final" and scored.correct.tolist() == [1] and scored.n.tolist() == [2]


def test_a_file_whose_references_the_verifier_cannot_read_is_refused(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    """gsm8k's verifier reads no number from these references: every response is unscorable, which was a table of
    zeros and exit 0, as if the model were always wrong."""
    lines = [json.dumps({"doc_id": i, "doc": {}, "target": target, "arguments": {}, "filter": "none",
                         "resps": [["#### 3", "#### 4"]], "filtered_resps": ["3"]}) + "\n"
             for i, target in enumerate(["\\frac{1}{2}", "x = y"])]
    path = _write_lm_eval(tmp_path, lines, name="samples_gsm8k_2026-11-27T10-00-00.000000.jsonl")
    assert main(["eval", "--from-samples", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "scores none of the 4 responses" in err and "--verifier" in err and "\n" not in err


@pytest.mark.parametrize("task", ["mmlu", "mathqa", "gsm8kx", "arc_easy|25"])
def test_a_task_without_a_verifier_names_the_flag(task: str) -> None:
    with pytest.raises(UserError, match="--verifier"):
        verifier_for(task)


def test_the_command_refuses_an_unknown_task_in_one_line_and_accepts_it_with_verifier(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "samples_mmlu_flan_2026-11-27T10-00-00.000000.jsonl"
    shutil.copy(FIXTURE, path)
    assert main(["eval", "--from-samples", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--verifier" in err and str(path) in err
    assert main(["eval", "--from-samples", str(path), "--verifier", "gsm8k", "--json"]) == 0
    task = json.loads(capsys.readouterr().out)["tasks"][0]
    assert task["verifier"] == "gsm8k" and task["metrics"]["pass@4"] == pytest.approx(0.75, abs=64 * EPS)


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _line(index: int, **changes) -> str:
    record = _fixture_lines()[index]
    record.update(changes)
    return json.dumps(record, ensure_ascii=False) + "\n"


LINES = FIXTURE.read_text(encoding="utf-8").splitlines(keepends=True)
BAD_LM_EVAL = {
    "torn last line": ([*LINES[:-1], LINES[-1][:40]], "line 16: not valid JSON"),
    "not JSON": ([*LINES[:3], "<html>\n", *LINES[4:]], "line 4: not valid JSON"),
    "empty line": ([*LINES[:2], "\n", *LINES[2:]], "line 3: an empty line between samples"),
    "null doc_id": ([_line(0, doc_id=None)], "line 1: doc_id is null"),
    "null target": ([_line(0, target=None)], "line 1: target is null"),
    "a list": (["[1, 2]\n"], "line 1: a JSON list"),
    "no resps": ([json.dumps({"doc_id": 0, "target": "1"}) + "\n"], "line 1: no resps"),
    "loglikelihood": ([_line(0, resps=[[[-1.5, False]], [[-0.5, True]]])], "line 1: the responses are not text"),
    "no response": ([_line(0, resps=[[]])], "line 1: resps holds no response"),
    "same filter twice": ([*LINES[:2], LINES[0]], "line 3: document 0 appears again for filter strict-match"),
    "filters disagree": ([LINES[0], _line(1, resps=[["#### 1"] * 4])], "line 2: document 0 has other responses"),
}


def test_empty_lines_at_the_end_of_a_samples_file_are_harmless(tmp_path: Path) -> None:
    path = _write_lm_eval(tmp_path, [*LINES, "\n", "  \n"])  # an editor's or a concatenation's trailing lines
    assert read_samples(path).references == read_samples(FIXTURE).references


@pytest.mark.parametrize("case", sorted(BAD_LM_EVAL))
def test_bad_lm_eval_files_are_refused_naming_file_and_line(case: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    lines, message = BAD_LM_EVAL[case]
    path = _write_lm_eval(tmp_path, lines)
    err = _one_line_error(["eval", "--from-samples", str(path)], capsys)
    assert str(path) in err and message in err


def test_sampling_flags_beside_from_samples_are_refused(capsys: pytest.CaptureFixture) -> None:
    err = _one_line_error(["eval", "--from-samples", str(FIXTURE), "--model", "embedded", "--n", "8"], capsys)
    assert "--model, --eval-samples would not apply" in err


def test_bad_paths_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert "no such file" in _one_line_error(["eval", "--from-samples", str(tmp_path / "nope.jsonl")], capsys)
    assert "no harness samples files inside" in _one_line_error(["eval", "--from-samples", str(tmp_path)], capsys)
    other = tmp_path / "results.jsonl"
    other.write_text("{}\n")
    assert "not a harness samples file" in _one_line_error(["eval", "--from-samples", str(other)], capsys)


def _rows_with(**changes) -> list[dict]:
    rows = _lighteval_rows()
    for part, values in changes.items():
        rows[1][part] = {**rows[1][part], **values}
    return rows


BAD_LIGHTEVAL = {
    "no text": (_rows_with(model_response={"text": []}), "row 2: model_response.text holds no generated text"),
    "no choices": (_rows_with(doc={"choices": []}), "row 2: doc has no choices"),
    "gold outside choices": (_rows_with(doc={"gold_index": 3}), "row 2: doc.gold_index 3 does not index"),
    "repeated id": (_rows_with(doc={"id": "0"}), "row 2: document 0 appears again (first at row 1)"),
}


@pytest.mark.parametrize("case", sorted(BAD_LIGHTEVAL))
def test_bad_lighteval_files_are_refused_naming_file_and_row(case: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    rows, message = BAD_LIGHTEVAL[case]
    path = _write_lighteval(tmp_path, rows)
    err = _one_line_error(["eval", "--from-samples", str(path)], capsys)
    assert str(path) in err and message in err


def test_a_foreign_or_damaged_parquet_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    foreign = _write_lighteval(tmp_path, [{"prediction": "18"}])
    assert "no column doc, model_response" in _one_line_error(["eval", "--from-samples", str(foreign)], capsys)
    damaged = tmp_path / LIGHTEVAL_NAME.replace("details_gsm8k", "details_math_500")
    damaged.write_bytes(b"PAR1 torn")
    assert "not a readable parquet file" in _one_line_error(["eval", "--from-samples", str(damaged)], capsys)


def test_the_text_report_prints_the_counts_scored_and_lighteval_names(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--from-samples", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "scored 32 responses of 8 documents (16 lines read, 8 of them further filters" in out
    assert "0 unscorable" in out and "pass@k:k=4&n=4" in out and "maj@n:n=4" in out and "avg@n:n=4" in out
    row = next(line for line in out.splitlines() if line.startswith("pass@4 "))
    assert row.split()[1] == "0.7500"


def test_a_verifier_without_vote_keys_reports_no_maj(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--from-samples", str(FIXTURE), "--verifier", "tests.test_harness_samples:last_word",
                 "--json", "--out", str(tmp_path / "out.json")]) == 0
    task = json.loads(capsys.readouterr().out)["tasks"][0]
    assert not any(key.startswith("maj@") for key in task["metrics"]) and "pass^4" in task["metrics"]
    assert json.loads((tmp_path / "out.json").read_text()) == {"tasks": [task]}


def last_word(completion: str, reference: str) -> float:
    """A user verifier with no vote keys: the completion's last word equals the reference's."""
    return float(completion.split()[-1:] == reference.split()[-1:])


def test_lighteval_math_500_references_are_read_through_their_boxed_solution(tmp_path: Path) -> None:
    """lighteval's math_500 gold is ``ANSWER: <solution>``; the math verifier takes the solution's last box."""
    problems = [json.loads(line) for line in (FIXTURE.parents[1] / "math500" / "test.jsonl").read_text(
        encoding="utf-8").splitlines()[:4]]
    texts = [[f"So the answer is $\\boxed{{{p['answer']}}}$.", "\\boxed{\\text{no idea}}", "I give up."]
             for p in problems]
    rows = [{"doc": {"query": p["problem"], "choices": [f"ANSWER: {p['solution']}"], "gold_index": 0, "id": str(i)},
             "metric": {"pass@k:k=1&n=3": 0.0}, "model_response": {"text": text}}
            for i, (p, text) in enumerate(zip(problems, texts, strict=True))]
    score = rescore(read_samples(_write_lighteval(tmp_path, rows, LIGHTEVAL_NAME.replace("gsm8k", "math_500"))))
    assert score.verifier == "math" and score.correct.tolist() == [1, 1, 1, 1]
    assert score.votes == [Votes(1, (1,), 1)] * 4  # the wrong box votes, the text without a box abstains


def test_documents_with_fewer_samples_bound_k_and_the_report_says_so(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    lines = [_line(i, resps=[_fixture_lines()[i]["resps"][0][:3]]) if i in (2, 3) else LINES[i] for i in range(16)]
    path = _write_lm_eval(tmp_path, lines)
    assert main(["eval", "--from-samples", str(path)]) == 0
    out = capsys.readouterr().out
    assert "n = 3 to 4 (k up to 3)" in out and "pass@3 " in out and "pass@4 " not in out
    assert "scored 31 responses of 8 documents" in out


LIGHTEVAL_RUN = Path(__file__).resolve().parent / "fixtures" / "lighteval"


def test_a_real_lighteval_details_file_rescores_to_lightevals_own_pass_at_1(capsys) -> None:
    # lighteval 0.13.0's own output (tests/fixtures/README.md): its pass@k:k=1&n=4 is the mean over documents of
    # c / n under exact match, which is grpolab's avg@n under the `exact` verifier, with the same standard error
    (results_file,) = LIGHTEVAL_RUN.glob("results_*.json")
    theirs = json.loads(results_file.read_text())["results"]["grpolab_reverse|0"]
    assert main(["eval", "--from-samples", str(LIGHTEVAL_RUN), "--json"]) == 0
    (task,) = json.loads(capsys.readouterr().out)["tasks"]
    assert (task["harness"], task["verifier"], task["prompts"], task["n"]) == ("lighteval", "exact", 8, 4)
    assert task["responses_scored"] == 32 and task["unscorable"] == 0
    assert task["metrics"]["avg@n"] == pytest.approx(theirs["pass@k"], abs=1e-12)
    assert task["se"]["avg@n"] == pytest.approx(theirs["pass@k_stderr"], abs=1e-12)
