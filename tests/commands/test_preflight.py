"""``grpolab preflight`` on the embedded model and task ``reverse``: the files it writes, its JSON, the band's
data folder read back as ``--data``, and its one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from grpolab.cli import main
from grpolab.preflight import predict
from grpolab.tasks import get_task

ARGS = ["preflight", "--model", "embedded", "--task", "reverse", "--eval-samples", "4", "--eval-limit", "24",
        "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("preflight")
    assert main([*ARGS, "--out", str(out), "--json", "--no-progress"]) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_the_counts_table_holds_every_train_prompt(written: tuple[Path, dict]) -> None:
    out, summary = written
    counts = pd.read_csv(out / "counts.csv")
    assert list(counts.columns[:4]) == ["prompt_id", "prompt", "n", "correct"]
    assert len(counts) == summary["prompts"] == 24 and set(counts["n"]) == {4}
    assert counts["correct"].between(0, 4).all()
    assert summary["p_mean"] == pytest.approx(counts["correct"].mean() / 4)
    table = predict.group_table(counts["correct"].to_numpy(), 4)
    rows = {row["group_size"]: row for row in summary["group_sizes"]}
    assert rows[4]["degenerate"] == pytest.approx(table.set_index("group_size").loc[4, "degenerate"])
    assert rows[8]["degenerate"] is None and rows[16]["d_iid"] is not None  # G > n: only the i.i.d. prediction


def test_the_band_and_control_folders_are_usable_as_data(written: tuple[Path, dict]) -> None:
    out, summary = written
    counts = pd.read_csv(out / "counts.csv")
    low, high = summary["band"]
    inside = counts[(counts["p"] >= low) & (counts["p"] <= high)]
    band = get_task("file", path=str(out / "band"), prompt_column="prompt", reference_column="answer")
    control = get_task("file", path=str(out / "control"), prompt_column="prompt", reference_column="answer")
    assert sorted(p.prompt for p in band.train) == sorted(inside["prompt"])
    assert len(band.train) == summary["band_prompts"]
    assert len(control.train) == len(band.train) and {p.prompt for p in control.train} <= set(counts["prompt"])
    reverse = get_task("reverse")
    assert [p.prompt for p in band.test] == [p.prompt for p in reverse.test]  # scored on the task's own test split
    assert all(p.reference == p.prompt[:-2][::-1] for p in band.train)  # reverse: the digits backwards


def test_the_page_embeds_the_figure_and_the_train_command(written: tuple[Path, dict]) -> None:
    out, summary = written
    page = (out / "preflight.html").read_text()
    assert "data:image/png;base64," in page and "Jensen gap" in page
    assert f"--data {out / 'band'}" in page and f"--group-size {summary['recommended_group_size']}" in page


def test_the_table_and_a_progress_bar_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0,1"]) == 0
    captured = capsys.readouterr()
    assert "sampling train prompts" in captured.err
    assert "Recommended G =" in captured.out and "Pass-rate band [0.000, 1.000]: 6 prompts" in captured.out


def test_one_sample_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--eval-samples", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--eval-samples must be at least 2" in err and "\n" not in err
    assert not (tmp_path / "counts.csv").exists()


def test_an_empty_band_names_the_range_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0.3,0.4", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()  # with n = 4 the estimated rates are 0, 0.25, 0.5, 0.75 or 1
    assert "no train prompt has an estimated pass rate in [0.300, 0.400]" in err and "range from" in err
    assert "\n" not in err
    assert len(pd.read_csv(tmp_path / "counts.csv")) == 6  # the sampled counts are kept to look at


def test_an_empty_band_still_prints_and_writes_the_predictions(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """An all-wrong model is what the pre-flight is for: its shares are printed and written though no band exists
    (was: the one-line refusal alone, no summary.json)."""
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0.3,0.4", "--no-progress"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "no band to train on" in out and "Jensen" in out  # the sentences and the table
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["band_prompts"] == 0 and summary["band_degenerate"] is None and summary["group_sizes"]
    assert not (tmp_path / "band").exists() and not (tmp_path / "control").exists()
    assert "band" not in summary["files"] and "Train on the band" not in (tmp_path / "preflight.html").read_text()


def test_the_train_lines_sample_as_the_preflight_did(tmp_path: Path) -> None:
    """The band's train line repeats the pre-flight's budget (8 tokens, not the task's 7), temperature and chat
    template (reverse's off, where the file task's default is on), which summary.json records."""
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0,1", "--temperature", "0.7",
                 "--no-progress", "--json"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["sampling"] == {"temperature": 0.7, "max_new_tokens": 8, "use_chat_template": False,
                                   "verifier": "exact", "seed": 0}
    page = (tmp_path / "preflight.html").read_text()
    assert "--temperature 0.7" in page and "&quot;use_chat_template&quot;: false" in page
    assert "&quot;max_new_tokens&quot;: 8" in page


def test_the_table_gives_each_share_its_standard_error(written: tuple[Path, dict]) -> None:
    out, summary = written
    counts = pd.read_csv(out / "counts.csv")["correct"].to_numpy()
    rows = {row["group_size"]: row for row in summary["group_sizes"]}
    from grpolab.diagnostics import degeneracy_per_prompt

    per_prompt = degeneracy_per_prompt(counts, 4, 2)
    assert rows[2]["degenerate_se"] == pytest.approx(per_prompt.std(ddof=1) / len(counts) ** 0.5)
    assert rows[8]["degenerate_se"] is None


def test_a_rerun_whose_band_is_empty_removes_the_earlier_band(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A second pre-flight into the same --out with an empty band left the first one's band/ and control/ there,
    to be trained on as if they were this pre-flight's."""
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0,1", "--no-progress"]) == 0
    assert (tmp_path / "band" / "train.jsonl").is_file() and (tmp_path / "control" / "train.jsonl").is_file()
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0.3,0.4", "--no-progress"]) == 2
    assert not (tmp_path / "band").exists() and not (tmp_path / "control").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["band_prompts"] == 0


def test_an_empty_band_leaves_a_band_folder_of_the_users_and_says_so(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "band").mkdir()
    (tmp_path / "band" / "notes.txt").write_text("mine")
    assert main([*ARGS, "--eval-limit", "6", "--out", str(tmp_path), "--band", "0.3,0.4", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds files the pre-flight does not write (notes.txt)" in err and "move it away" in err
    assert "\n" not in err and (tmp_path / "band" / "notes.txt").read_text() == "mine"
    assert json.loads((tmp_path / "summary.json").read_text())["band_prompts"] == 0  # the predictions are kept


def test_an_out_that_cannot_be_written_is_refused_before_sampling(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from grpolab.preflight import pipeline

    monkeypatch.setattr(pipeline, "_sample", lambda *a, **k: pytest.fail("sampled before checking --out"))
    (tmp_path / "a-file").write_text("")
    assert main([*ARGS, "--out", str(tmp_path / "a-file" / "pf"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"cannot write to --out {tmp_path / 'a-file' / 'pf'}" in err and "\n" not in err
    assert main([*ARGS, "--out", str(tmp_path / "a-file"), "--no-progress"]) == 2
    assert "a-file is a file; choose a folder" in capsys.readouterr().err
