"""Verifiers: hand-written truth tables, the registry, robustness on arbitrary and pathological text."""

from __future__ import annotations

import json
import multiprocessing
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpolab import verifiers
from grpolab.errors import UserError
from grpolab.verifiers import _pool, gsm8k, math_answer
from grpolab.verifiers._text import last_boxed
from grpolab.verifiers._user import VerifierTimeout
from gsm8k_cases import GSM8K_CASES
from pathological_texts import PATHOLOGICAL

BINARY = {0.0, 1.0, None}


@pytest.fixture(scope="module", autouse=True)
def _warm_math_verify() -> None:
    math_answer.warm_up()  # the one-time server start-up is not part of any per-call budget


# ---------------------------------------------------------------------------------------------- gsm8k



@pytest.mark.parametrize(("completion", "reference", "auto", "strict"), GSM8K_CASES)
def test_gsm8k_table(completion: str, reference: str, auto: float | None, strict: float | None) -> None:
    assert verifiers.score("gsm8k", completion, reference) == auto
    assert verifiers.score("gsm8k_strict", completion, reference) == strict


def test_gsm8k_flexible_mode_and_details() -> None:
    assert gsm8k.score("#### 18 but later 20", "20", mode="flexible") == 1.0
    reward, parts = verifiers.score_with_details("gsm8k", "total 1,234 apples", "1234")
    assert reward == 1.0
    assert parts == {"extracted": "1,234", "mode": "flexible", "reference": "1234"}


# ----------------------------------------------------------------------------------------------- math

MATH_CASES = [
    ("so $x = \\boxed{\\frac{14}{3}}$.", "14/3", 1.0),
    ("\\boxed{14/3}", "\\frac{14}{3}", 1.0),
    ("\\boxed{(3, \\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\fbox{7}", "7", 1.0),
    ("\\boxed 7$", "7", 1.0),
    ("first \\boxed{3}, finally \\boxed{4}", "4", 1.0),  # the last box wins
    ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}", 1.0),
    ("\\boxed{[0, 1)}", "[0,1)", 1.0),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    ("\\boxed{4}", "5", 0.0),
    ("\\boxed{(3, \\pi)}", "\\left( 3, \\frac{\\pi}{2} \\right)", 0.0),
    ("\\boxed{[0, 1]}", "[0,1)", 0.0),
    ("the answer is 5", "5", 0.0),  # no box: not extracted
    ("\\boxed{5", "5", 0.0),  # never closed
    ("\\boxed{}", "5", 0.0),
    ("\\boxed{5}", "", None),
    ("\\boxed{5}", "Solution text ... so $\\boxed{5}$.", 1.0),  # a solution as the reference
]


@pytest.mark.parametrize(("completion", "reference", "expected"), MATH_CASES)
def test_math_table(completion: str, reference: str, expected: float | None) -> None:
    assert verifiers.score("math", completion, reference) == expected


MATH_FINAL_CASES = [
    ("so \\boxed{\\frac{1}{2}}", "0.5", 1.0),  # a box first, as math reads it
    ("$x = 2$ hence \\boxed{3}", "3", 1.0),  # the box wins over dollars
    ("Final Answer: The final answer is $24$. I hope it is correct.", "24", 1.0),  # minerva_math
    ("Final Answer: The final answer is 3/4. I hope it is correct.", "\\frac{3}{4}", 1.0),
    (" $24$", "24", 1.0),  # hendrycks_math: between the first and last $
    ("We get $2$ and then $\\frac{1}{2}$", "2", 0.0),  # first to last $: "2$ and then $\\frac{1}{2}"
    (" 204", "204", 1.0),  # aime: the whole response
    (" 205", "204", 0.0),
    ("", "3", 0.0),
    ("$$", "3", 0.0),
    (" 3", "", None),
]


@pytest.mark.parametrize(("completion", "reference", "expected"), MATH_FINAL_CASES)
def test_math_final_reads_the_harnesses_answer_forms(completion: str, reference: str, expected: float | None) -> None:
    assert verifiers.score("math_final", completion, reference) == expected


def test_math_details_and_precheck() -> None:
    reward, parts = verifiers.score_with_details("math", "\\boxed{\\left(1,2\\right)}", "(1, 2)")
    assert (reward, parts["mode"], parts["extracted"]) == (1.0, "precheck", "\\left(1,2\\right)")
    reward, parts = verifiers.score_with_details("math", "\\boxed{14/3}", "\\frac{14}{3}")
    assert (reward, parts["mode"], parts["timed_out"]) == (1.0, "math_verify", False)


def test_math_time_limit_is_hard() -> None:
    """sympy cannot be interrupted inside 10^(10^10): the check's child process is killed at the limit (the
    worker's "timeout" reply). How soon the call returns is reported by ``benchmarks/bench_verifiers.py``."""
    reward, parts = verifiers.score_with_details("math", "\\boxed{10^{10^{10}}}", "5")
    assert (reward, parts["timed_out"], parts["reason"]) == (0.0, True, "timeout")
    assert verifiers.score("math", "\\boxed{14/3}", "\\frac{14}{3}") == 1.0  # the worker came back


def test_math_from_threads() -> None:
    cases = [(c, r, e) for c, r, e in MATH_CASES if e is not None][:8]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda case: verifiers.score("math", case[0], case[1]), cases))
    assert results == [e for _, _, e in cases]


def _score_math_in_worker(case: tuple[str, str]) -> float | None:
    return verifiers.score("math", *case)


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
def test_math_from_daemonic_pool_worker() -> None:
    with multiprocessing.get_context("fork").Pool(1) as pool:  # daemonic workers may not use mp.Process
        assert pool.map(_score_math_in_worker, [("\\boxed{14/3}", "\\frac{14}{3}"), ("\\boxed{1}", "2")]) == [
            1.0,
            0.0,
        ]


def test_last_boxed_nesting() -> None:
    assert last_boxed("a \\boxed{\\frac{1}{\\sqrt{2}}} b") == ("\\frac{1}{\\sqrt{2}}", 2)
    assert last_boxed("\\boxed{" * 100 + "1" + "}" * 100) == ("1", 693)  # the innermost box is last
    assert last_boxed("\\boxed{" + "{" * 100 + "1" + "}" * 101) is None  # deeper than MAX_BRACE_DEPTH
    assert last_boxed("\\boxedx{1}") is None


# ---------------------------------------------------------------------------------------------- exact

@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("42", "42", 1.0),
        ("  42\n", "42", 1.0),
        ("1  +\t 2", "1 + 2", 1.0),
        ("42\njunk", "42", 0.0),  # the whole completion counts
        ("42.", "42", 0.0),
        ("Yes", "yes", 0.0),
        ("", "42", 0.0),
        ("42", "   ", None),
    ],
)
def test_exact_table(completion: str, reference: str, expected: float | None) -> None:
    assert verifiers.score("exact", completion, reference) == expected


# ------------------------------------------------------------------------------------------- registry

def test_registry_names_and_duplicates() -> None:
    assert {"gsm8k", "gsm8k_strict", "math", "exact"} <= set(verifiers.available())
    with pytest.raises(ValueError, match="already registered"):
        verifiers.register("gsm8k")(lambda completion, reference: 1.0)


def test_unknown_name_message() -> None:
    with pytest.raises(UserError, match=r"unknown verifier 'gsm9k'; choose one of .*gsm8k.*package\.module"):
        verifiers.get_verifier("gsm9k")


@pytest.mark.parametrize("path", ["no_such_pkg.mod:fn", "no_such_pkg.fn", "os.path:no_such_fn", "os:sep"])
def test_bad_dotted_path_message(path: str) -> None:
    with pytest.raises(UserError, match=r"package\.module:function|not callable"):
        verifiers.get_verifier(path)


def test_dotted_path_user_verifier(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_rewards.py").write_text(
        "def length_ok(completion, reference):\n    return float(len(completion) == len(reference))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for path in ("my_rewards:length_ok", "my_rewards.length_ok"):
        assert verifiers.get_verifier(path)("abc", "xyz") == 1.0
        assert verifiers.score(path, "ab", "xyz") == 0.0
        assert verifiers.score_with_details(path, "abc", "xyz") == (1.0, {})


SLOW_VERIFIERS = """
import sys, time
from pathlib import Path

def hang(completion, reference):
    if completion == "hang":
        time.sleep(3600)
    if completion == "spin":
        while True:
            pass
    print("a verifier may print", flush=True)  # must not break the worker's replies
    return float(completion == reference)

def hang_once(completion, reference):
    marker = Path(__file__).with_name("hung_once")
    if not marker.exists():
        marker.write_text("x")
        time.sleep(3600)
    return 1.0

def bad(completion, reference):
    if completion == "raise":
        raise ValueError("broken verifier")
    return "yes"

def always_slow(completion, reference):
    time.sleep(3600)
"""


def test_user_verifier_that_never_returns_scores_none_and_goes_on(tmp_path, monkeypatch) -> None:
    from grpolab.rewards import score_batch

    (tmp_path / "slow_rewards.py").write_text(SLOW_VERIFIERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    verifier = verifiers.get_verifier("slow_rewards:hang")
    assert verifier("7", "7") == 1.0  # starts the worker
    for stuck in ("hang", "spin"):
        with pytest.raises(VerifierTimeout, match="verifier 'slow_rewards:hang' did not return within 1 s"):
            verifier(stuck, "7")
        assert verifier("7", "7") == 1.0, stuck  # the stuck child was replaced
    with pytest.warns(RuntimeWarning, match="did not return within 1 s; the completion is scored None"):
        scores = score_batch(verifier, ["7", "hang", "8"], ["7", "7", "7"])
    assert np.isnan(scores.rewards[1]) and scores.rewards[[0, 2]].tolist() == [1.0, 0.0]
    assert scores.errors == 0 and scores.timeouts == 1 and "within 1 s" in scores.first_timeout
    bad = score_batch(verifiers.get_verifier("slow_rewards:bad"), ["raise", "x"], ["r", "r"])
    assert bad.errors == 2 and "broken verifier" in bad.first_error and np.isnan(bad.rewards).all()


def test_a_run_goes_on_past_a_hung_user_verifier(tmp_path, monkeypatch, capsys) -> None:
    from grpolab.cli import main

    (tmp_path / "slow_rewards.py").write_text(SLOW_VERIFIERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["train", "--out", str(tmp_path / "run"), "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
            "--eval-limit", "2", "--eval-samples", "0", "--no-eval-start", "--checkpoint-every", "0",
            "--threads", "1", "--no-progress", "--max-new-tokens", "4", "--verifier", "slow_rewards:hang_once"]
    with pytest.warns(RuntimeWarning, match="slow_rewards:hang_once"):
        assert main(args) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["rollout/unscorable"] == 1 and rows[0]["rollout/verifier_errors"] == 0
    assert rows[0]["rollout/verifier_timeouts"] == 1


@pytest.fixture
def always_slow(tmp_path, monkeypatch) -> str:
    """A user verifier that never returns, under a 0.2 s limit instead of 1 s (each time-out costs less)."""
    (tmp_path / "slow_rewards.py").write_text(SLOW_VERIFIERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_pool, "DEFAULT_TIME_LIMIT_S", 0.2)
    return "slow_rewards:always_slow"


def _one_line_error(argv: list[str], capsys) -> str:
    from grpolab.cli import main

    with pytest.warns(RuntimeWarning, match="did not return within 0.2 s"):
        assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


def test_a_run_stops_when_the_user_verifier_times_out_on_most_completions(always_slow, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    error = _one_line_error(["train", "--out", str(out), "--steps", "2", "--prompts-per-step", "1", "--group-size",
                             "2", "--eval-samples", "0", "--no-eval-start", "--checkpoint-every", "0", "--threads",
                             "1", "--no-progress", "--max-new-tokens", "4", "--verifier", always_slow], capsys)
    assert error.startswith("grpolab train: error: step 1: the verifier slow_rewards:always_slow timed out on 2 of 2 "
                            "completions (verifier 'slow_rewards:always_slow' did not return within 0.2 s)"), error
    assert "make it return faster" in error
    assert (out / "metrics.jsonl").read_text() == ""  # stopped before training on nothing


def test_an_evaluation_stops_when_the_user_verifier_times_out(always_slow, capsys) -> None:
    error = _one_line_error(["eval", "--limit", "1", "--n", "0", "--max-new-tokens", "4", "--verifier", always_slow],
                            capsys)
    assert "evaluation: the verifier slow_rewards:always_slow timed out on 1 of 1 completions" in error


def test_a_file_task_stops_when_the_user_verifier_times_out_on_its_references(always_slow, tmp_path) -> None:
    from grpolab.tasks import get_task

    data = tmp_path / "rows.jsonl"
    data.write_text('{"q": "1+1", "a": "2"}\n{"q": "2+2", "a": "4"}\n')
    with pytest.warns(RuntimeWarning), pytest.raises(UserError, match=r"timed out on 2 of 2 references scored "
                                                     r"against themselves \(verifier 'slow_rewards:always_slow'"):
        get_task("file", path=str(data), prompt_column="q", reference_column="a", verifier=always_slow)


# ----------------------------------------------------------------------------------------- robustness

REFERENCES = ["18", "#### 18", "\\frac{14}{3}", "10^{10^{10}}", "\\boxed{" * 50, "١٨", "\x00"]


# pathological texts whose first 4,000 characters hold exactly one number: a reference gsm8k can read
ONE_NUMBER = {"1MB digits", "control characters", "deep latex", "huge decimal", "huge number", "power tower plain"}
NEEDS_TIME_LIMIT = {"power tower", "factorial"}  # math-verify never finishes these: the hard limit stops them


@pytest.mark.parametrize("name", ["gsm8k", "gsm8k_strict", "math", "exact"])
@pytest.mark.parametrize("label", sorted(PATHOLOGICAL))
def test_pathological_inputs_score_right(name: str, label: str) -> None:
    """Each verifier gives the right score on pathological text, as completion and as reference. How long the
    worst of them takes is reported by ``benchmarks/bench_verifiers.py``, not asserted here."""
    text = PATHOLOGICAL[label]
    reward, parts = verifiers.score_with_details(name, text, "18")
    assert reward == 0.0
    if name == "math" and label in NEEDS_TIME_LIMIT:
        assert parts["timed_out"] is True
    # "\\frac{14}{3}" holds two numbers: no number to compare against for gsm8k
    assert verifiers.score(name, text, "\\frac{14}{3}") == (None if name.startswith("gsm8k") else 0.0)
    reward = verifiers.score(name, "\\boxed{18} #### 18", text[:4000])
    if name.startswith("gsm8k"):
        assert reward == (0.0 if label in ONE_NUMBER else None)
    else:
        assert reward in ({0.0, None} if name == "math" else {0.0})  # math: None when the reference has no answer


texts = st.text(st.characters(codec="utf-8"), max_size=300) | st.text("0123456789,.$-#\\{}boxed ", max_size=80)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=texts, reference=texts | st.sampled_from(REFERENCES))
def test_text_verifiers_never_raise(completion: str, reference: str) -> None:
    for name in ("gsm8k", "gsm8k_strict", "exact"):
        assert verifiers.score(name, completion, reference) in BINARY
        reward, parts = verifiers.score_with_details(name, completion, reference)
        assert reward in BINARY and isinstance(parts, dict)


latex = st.text("0123456789+-*/^_{}()[]\\fracsqrtpi,.x =!", max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=latex, reference=latex | st.sampled_from(REFERENCES))
def test_math_never_raises(answer: str, reference: str) -> None:
    reward, parts = verifiers.score_with_details("math", "\\boxed{" + answer + "}", reference)
    assert reward in BINARY
    assert not parts.get("timed_out") or reward == 0.0  # a check stopped at the time limit scores 0.0
