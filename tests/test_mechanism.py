"""grpolab.mechanism's pieces: the token classifier, per-token shifts on hand-made tensors, the seed-level
summary and its pass@k reading, and log-prob alignment with the sampler on the embedded model."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from tests.engine.test_static_decode import _reordering_gap

from grpolab import render, verifiers
from grpolab.mechanism import content_mask, is_content_text, passk_reading, shifts, summarise
from grpolab.mechanism.render import TITLE as render_title
from grpolab.mechanism.render import markdown
from grpolab.models import load_policy
from grpolab.tasks import get_task

pytestmark = pytest.mark.fast


class PieceTokenizer:
    """A fake tokenizer whose ids stand for whole text pieces (as a BPE vocabulary's do); id 0 is EOS."""

    pieces = ("", "The answer is", " 88", "####", "\\boxed{", "}", "6", ".", " plus")
    all_special_ids = (0,)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids)


@pytest.mark.parametrize(("text", "content"), [
    ("7", True), (" 88", True), ("6.", True), ("x2", True),
    ("The answer is", False), (" answer", False), ("####", False), ("\\boxed{", False), ("}", False),
    (".", False), ("\n", False), ("", False), ("٣", False),  # an Arabic-Indic digit is not ASCII
])
def test_digits_are_content_and_words_markup_punctuation_are_format(text: str, content: bool) -> None:
    assert is_content_text(text) is content


def test_content_mask_labels_pieces_and_leaves_padding_out() -> None:
    ids = torch.tensor([[1, 2, 7, 0, 0], [4, 6, 5, 3, 0]])  # "The answer is 88." EOS pad / \boxed{6}#### EOS
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    content = content_mask(ids, mask, PieceTokenizer())
    assert content.tolist() == [[False, True, False, False, False], [False, True, False, False, False]]


def _fixed(start: list[list[float]], mask: list[list[int]], content: list[list[bool]],
           correct: list[bool]) -> shifts.FixedCompletions:
    batch = SimpleNamespace(rollout=SimpleNamespace(completion_mask=torch.tensor(mask)))  # all that is read
    return shifts.FixedCompletions(batch, torch.tensor(content), torch.tensor(correct),
                                   torch.tensor(start, dtype=torch.float64))


def test_shift_rows_by_hand() -> None:
    fixed = _fixed(start=[[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]], mask=[[1, 1, 1], [1, 1, 0]],
                   content=[[False, True, False], [True, False, False]], correct=[True, False])
    end = torch.tensor([[-1.5, -1.0, -0.5], [-3.0, -1.0, 0.0]], dtype=torch.float64)
    rows = {(r["token_class"], r["outcome"]): r for r in shifts.shift_rows(fixed, end)}
    assert rows["content", "correct"]["dlogp"] == pytest.approx(1.0)
    assert rows["format", "correct"]["dlogp"] == pytest.approx(-0.25)  # (-0.5 + 0) / 2
    assert rows["content", "wrong"]["dlogp"] == pytest.approx(-2.0)
    assert rows["format", "wrong"]["dlogp"] == pytest.approx(0.0) and rows["format", "wrong"]["tokens"] == 1
    assert rows["all", "all"]["tokens"] == 5 and rows["all", "all"]["completions"] == 2
    assert rows["content", "wrong"]["dprob"] == pytest.approx(math.exp(-3) - math.exp(-1))
    for outcome in ("correct", "wrong", "all"):
        assert rows["format", outcome]["tokens"] + rows["content", outcome]["tokens"] == rows["all", outcome]["tokens"]


def test_a_class_without_tokens_has_nan_means() -> None:
    fixed = _fixed(start=[[-1.0]], mask=[[1]], content=[[False]], correct=[False])
    rows = {(r["token_class"], r["outcome"]): r for r in shifts.shift_rows(fixed, torch.tensor([[-2.0]]).double())}
    assert rows["content", "wrong"]["tokens"] == 0 and math.isnan(rows["content", "wrong"]["dlogp"])
    assert math.isnan(rows["format", "correct"]["dlogp"])


def _passk_frame(changes: dict[int, list[float]]) -> pd.DataFrame:
    rows = [{"part": "passk", "measure": f"pass@{k}", "estimator": "sign", "group_size": 4, "token_class": "",
             "outcome": "", "phase": "change", "k": k, "value": v, "tokens": np.nan, "seed": s}
            for k, values in changes.items() for s, v in enumerate(values)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("changes", "reading"), [
    ({1: [0.10, 0.12, 0.08], 4: [0.0, -0.02, 0.01]}, "search compression"),
    ({1: [0.10, 0.12, 0.08], 4: [0.05, 0.04, 0.06]}, "capacity gain"),
    ({1: [-0.10, -0.12, -0.08], 4: [-0.05, 0.0, 0.01]}, "loss"),
    ({1: [-0.10, 0.12, 0.0], 4: [-0.05, 0.0, 0.05]}, "no clear change"),
])
def test_passk_reading(changes: dict[int, list[float]], reading: str) -> None:
    summary = summarise(_passk_frame(changes))
    assert summary.loc[summary["k"] == 1, "mean"].item() == pytest.approx(np.mean(changes[1]))
    assert passk_reading(summary, "sign", 4).startswith(reading)


def test_summary_of_an_unrecorded_measure_is_nan_with_no_runs() -> None:
    frame = _passk_frame({1: [np.nan, np.nan]})
    row = summarise(frame).iloc[0]
    assert row["n_runs"] == 0 and math.isnan(row["mean"])


def _one_run_summary(estimator: str) -> pd.DataFrame:
    """Two seeds with the same values (a zero-width t interval) of every part: a format measure, token shifts
    per (outcome, class), pass@1 and pass@2."""
    rows = [{"part": "format", "measure": "sampled_no_number", "phase": phase, "value": value}
            for phase, value in (("start", 0.1), ("end", 0.3), ("change", 0.2))]
    rows += [{"part": "passk", "measure": f"pass@{k}", "phase": phase, "k": k, "value": value}
             for k in (1, 2) for phase, value in (("start", 0.2 * k), ("end", 0.3 * k), ("change", 0.1 * k))]
    rows += [{"part": "tokens", "measure": measure, "token_class": token_class, "outcome": outcome,
              "value": -0.01, "tokens": 10}
             for measure in ("dlogp", "dprob") for token_class in ("format", "content", "all")
             for outcome in ("correct", "wrong", "all")]
    frame = pd.DataFrame(rows).assign(estimator=estimator, group_size=4)
    frame = pd.concat([frame.assign(seed=0), frame.assign(seed=1)], ignore_index=True)
    return summarise(frame.fillna({"token_class": "", "outcome": "", "phase": ""}))


def test_markdown_comes_from_the_shared_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {"out": "cmp", "prompts": 2, "samples": 4, "model": "m", "seed": 0, "temperature": 1.0,
                "correct": 3, "wrong": 5}
    text = markdown(_one_run_summary("odd|name"), settings, b"")
    assert text.startswith(f"# {render_title}\n\nCompare output: `cmp`.")
    assert render_title == "Mechanism: format breakage, per-token shifts, pass@k, the update's geometry"
    assert "| odd\\|name | 4 | sampled_no_number | 10.0% | 30.0% | +20.0 [+20.0, +20.0] | 2 |" in text
    assert text.count("| odd\\|name | 4 |") == 1 + 9 + 2 and "\n- odd|name G=4: capacity gain" in text
    assert "](mechanism.png)" in text
    monkeypatch.setattr(render, "_md_table", lambda caption, frame: f"TABLE rows={len(frame)}")
    text = markdown(_one_run_summary("sign"), settings, b"")  # every table is the renderer's
    assert [line for line in text.splitlines() if "TABLE" in line] == ["TABLE rows=1", "TABLE rows=9", "TABLE rows=2"]
    assert "|---|" not in text


def test_start_logprobs_match_what_the_sampler_recorded() -> None:
    """The scored tokens are the sampled ones, position for position: the sampler's own log-probabilities
    (float32 on the embedded model) agree with ``completion_logprobs`` on every completion token."""
    policy = load_policy("embedded")
    task = get_task("reverse")
    batch = shifts.draw(policy.model, policy.tokenizer, list(task.test[:6]), verifiers.get_verifier(task.verifier),
                        samples=3, seed=5, temperature=1.0, max_new_tokens=task.max_new_tokens,
                        use_chat_template=False)
    logprobs = shifts.completion_logprobs(policy.model, batch, temperature=1.0, rows=4)
    mask = batch.rollout.completion_mask.bool()
    # the sampler's decoder and a teacher-forced forward of 4 rows sum in other orders: within the derived
    # reordering gap (tests/float_bounds.py; ~1.3e-4 here), not a measured 1e-4
    gap = _reordering_gap(policy.model, batch.rollout, torch.float32)
    assert (logprobs[mask] - batch.rollout.logprobs.double()[mask]).abs().max() <= gap
    again = shifts.completion_logprobs(policy.model, batch, temperature=1.0, rows=4)
    assert torch.equal(logprobs, again)


def test_summary_intervals_are_student_t_and_one_run_gives_none() -> None:
    rows = [{"part": "passk", "measure": "pass@1", "phase": "change", "k": 1, "value": value, "seed": seed}
            for seed, value in enumerate((0.1, 0.2, 0.6))]
    frame = pd.DataFrame(rows).assign(estimator="sign", group_size=4, token_class="", outcome="", tokens=0)
    row = summarise(frame).iloc[0]
    half = 4.302653 * np.std([0.1, 0.2, 0.6], ddof=1) / np.sqrt(3)  # t_{2, 0.975}
    assert row["mean"] == pytest.approx(0.3) and row["ci_high"] - row["mean"] == pytest.approx(half, rel=1e-5)
    one = summarise(frame.iloc[:1]).iloc[0]
    assert one["mean"] == pytest.approx(0.1) and np.isnan(one["ci_low"]) and np.isnan(one["ci_high"])


def test_samples_that_cannot_fit_are_refused_naming_mechanisms_own_flag() -> None:
    # was: "...; lower the completions per prompt (--group-size, --eval-samples) or --max-new-tokens", flags
    # grpolab mechanism does not have
    from grpolab.errors import UserError

    policy = load_policy("embedded")
    task = get_task("reverse")
    with pytest.raises(UserError) as caught:
        shifts.draw(policy.model, policy.tokenizer, list(task.test[:4]), verifiers.get_verifier(task.verifier),
                    samples=10**9, seed=0, temperature=1.0, max_new_tokens=task.max_new_tokens,
                    use_chat_template=False)
    message = str(caught.value)
    assert message.startswith("sampling 1000000000 completions per prompt of the 4 test prompts of up to ")
    assert message.endswith("is available; lower --samples") and "--group-size" not in message, message
