"""``grpolab.train.no_signal``: a run whose first steps give no gradient signal says so in one line naming the
likely causes; a run that learns says nothing."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from grpolab.cli import _one_line_warning, main
from grpolab.train.no_signal import NO_SIGNAL, WATCHED_STEPS, NoSignalWarning, NoSignalWatch, no_signal_line

pytestmark = pytest.mark.fast

WRONG = {"starvation/degenerate": 1.0, "starvation/uniform": 1.0, "starvation/all_wrong": 1.0,
         "starvation/all_correct": 0.0, "starvation/unscorable_groups": 0.0, "starvation/useful_fraction": 0.0}
SPLIT = {**WRONG, "starvation/all_wrong": 0.5, "starvation/all_correct": 0.5}  # every prompt solved always or never
MIXED = {**WRONG, "starvation/degenerate": 0.5, "starvation/uniform": 0.5, "starvation/all_wrong": 0.5,
         "starvation/useful_fraction": 0.5}
TINY = ["--steps", "3", "--prompts-per-step", "4", "--group-size", "2", "--eval-limit", "4", "--eval-samples", "0",
        "--no-eval-start", "--checkpoint-every", "0", "--threads", "1", "--no-progress"]


def test_the_line_names_the_causes_of_what_the_groups_were() -> None:
    assert "every completion was wrong" in no_signal_line([WRONG] * 3, 4)
    assert "verifier that always returns 0" in no_signal_line([WRONG] * 3, 4)
    assert "solved always or never" in no_signal_line([SPLIT] * 3, 4)
    assert "--group-size 1" in no_signal_line([WRONG] * 3, 1)
    assert "every advantage was 0" in no_signal_line([{**MIXED, "starvation/useful_fraction": 0.0}] * 3, 4)
    sign_on_wrong = {**WRONG, "starvation/degenerate": 0.0, "starvation/useful_fraction": 1.0}  # A = 2r - 1 = -1
    assert "every completion was wrong" in no_signal_line([sign_on_wrong] * 3, 4)
    assert no_signal_line([WRONG, MIXED, WRONG], 4) is None  # one step with signal: the run can learn
    assert no_signal_line([], 4) is None


def test_the_watch_warns_once_after_the_watched_steps() -> None:
    watch = NoSignalWatch(group_size=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        said = [watch.observe(step, WRONG) for step in range(1, WATCHED_STEPS + 3)]
    assert said[: WATCHED_STEPS - 1] == [None] * (WATCHED_STEPS - 1) and said[WATCHED_STEPS:] == [None, None]
    assert said[WATCHED_STEPS - 1].startswith(f"no gradient signal in the first {WATCHED_STEPS} step(s)")
    assert [w.category for w in caught] == [NoSignalWarning]


def _impossible_task(path: Path) -> Path:
    """Digit prompts whose reference is letters: the embedded model writes digits, so every completion is wrong."""
    rows = [{"question": f"{i:03d}{i % 7}+=", "answer": "abc"} for i in range(40)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("dead", [True, False])
def test_a_run_that_cannot_learn_says_so_in_one_line(dead: bool, tmp_path: Path) -> None:
    task = (["--task", "file", "--data", str(_impossible_task(tmp_path / "q.jsonl")), "--prompt-column", "question",
             "--reference-column", "answer", "--verifier", "exact", "--task-options", '{"max_new_tokens": 8}']
            if dead else ["--task", "reverse"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["train", "--model", "embedded", *task, "--out", str(tmp_path / "run"), *TINY]) == 0
    said = [w for w in caught if w.category is NoSignalWarning]
    if not dead:
        assert said == []
        return
    assert len(said) == 1
    line = _one_line_warning("train")(said[0].message, NoSignalWarning, said[0].filename, said[0].lineno)
    assert line.startswith("grpolab train: warning: no gradient signal in the first 3 step(s)")
    assert "every completion was wrong" in line and line.count("\n") == 1  # how grpolab.cli prints it: one line


def test_with_stop_the_watch_marks_the_step_and_the_summary_fields() -> None:
    going, stopping = NoSignalWatch(group_size=4), NoSignalWatch(group_size=4, stop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(1, WATCHED_STEPS + 1):
            going.observe(step, WRONG)
            stopping.observe(step, WRONG)
    assert going.stopped_at is None and going.summary_fields() == {}
    fields = stopping.summary_fields()
    assert fields["status"] == NO_SIGNAL and fields["no_signal_at_step"] == WATCHED_STEPS
    assert fields["reason"].endswith(f"the run stops at step {WATCHED_STEPS} (--stop-when-dead)")


@pytest.mark.parametrize("stop", [True, False])
def test_stop_when_dead_ends_a_run_with_every_advantage_zero(stop: bool, tmp_path: Path) -> None:
    task = ["--task", "file", "--data", str(_impossible_task(tmp_path / "q.jsonl")), "--prompt-column", "question",
            "--reference-column", "answer", "--verifier", "exact", "--task-options", '{"max_new_tokens": 8}',
            "--advantage", "grpo"]  # every completion wrong, group-centred: every advantage 0
    run = tmp_path / "run"
    flags = [*TINY, "--steps", "5"] + (["--stop-when-dead"] if stop else [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["train", "--model", "embedded", *task, "--out", str(run), *flags]) == 0
    [said] = [str(w.message) for w in caught if w.category is NoSignalWarning]
    summary = json.loads((run / "summary.json").read_text())
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    ends = [json.loads(line) for line in (run / "eval.jsonl").read_text().splitlines()]
    if not stop:
        assert summary["status"] == "finished" and steps == [1, 2, 3, 4, 5] and "stops" not in said
        return
    assert summary["status"] == NO_SIGNAL and summary["no_signal_at_step"] == WATCHED_STEPS
    assert steps == [1, 2, 3] and [(e["phase"], e["step"]) for e in ends] == [("end", 3)]
    assert said == summary["reason"] and "every completion was wrong" in said and "stops at step 3" in said
    assert (run / "final").is_dir()


def _watched(watch: NoSignalWatch, start: int, rows: list[tuple[int, dict]]) -> str | None:
    """Resume ``watch`` at checkpoint ``start`` from logged ``rows`` and observe the steps after it up to the last
    watched one with every group wrong; the line it said, if any."""
    watch.resume(start, [{"step": step, **row} for step, row in rows])
    said = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(start + 1, WATCHED_STEPS + 1):
            said = watch.observe(step, WRONG) or said
    return said


def test_a_resumed_watch_judges_the_steps_before_its_checkpoint_too() -> None:
    # learned at steps 1-2, then one dead step: an undisturbed run says nothing, so the resumed one says nothing
    assert _watched(NoSignalWatch(4, stop=True), 2, [(1, MIXED), (2, MIXED)]) is None
    # dead from the start: the resumed run says what the undisturbed one says, over the same 3 steps
    dead = NoSignalWatch(4, stop=True)
    assert _watched(dead, 2, [(1, WRONG), (2, WRONG)]).startswith(f"no gradient signal in the first {WATCHED_STEPS}")
    assert dead.stopped_at == WATCHED_STEPS
    # a log that lacks a watched step before the checkpoint: nothing is judged rather than fewer steps
    blind = NoSignalWatch(4, stop=True)
    assert _watched(blind, 2, [(2, WRONG), (5, WRONG)]) is None and blind.stopped_at is None
    # a checkpoint past the watched steps: nothing left to judge
    assert _watched(NoSignalWatch(4, stop=True), WATCHED_STEPS + 1, [(1, WRONG)]) is None


def test_a_resumed_dead_run_stops_where_the_undisturbed_one_does(tmp_path: Path) -> None:
    """A run killed after step 2 of a task it cannot learn, resumed: the warning counts steps 1-3 (not the one step
    left of the window) and the run stops at step 3 as it would have."""
    task = ["--task", "file", "--data", str(_impossible_task(tmp_path / "q.jsonl")), "--prompt-column", "question",
            "--reference-column", "answer", "--verifier", "exact", "--task-options", '{"max_new_tokens": 8}',
            "--advantage", "grpo"]
    run = tmp_path / "run"
    flags = [*TINY, "--checkpoint-every", "1", "--stop-when-dead"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["train", "--model", "embedded", *task, "--out", str(run), *flags, "--steps", "2"]) == 0
        assert [w for w in caught if w.category is NoSignalWarning] == []  # 2 steps: the window is not over
        assert main(["train", "--out", str(run), "--resume", "--steps", "5"]) == 0
    [said] = [str(w.message) for w in caught if w.category is NoSignalWarning]
    assert said.startswith(f"no gradient signal in the first {WATCHED_STEPS} step(s)") and "stops at step 3" in said
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == NO_SIGNAL and summary["no_signal_at_step"] == WATCHED_STEPS
