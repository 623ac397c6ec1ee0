"""The audit's memory is bounded by bytes, not rows: a small zstd Parquet file of long prompt ids (tens of
kilobytes on disk, hundreds of megabytes decoded) is audited under a 2 GiB address-space limit. Nor by the
range of steps a log spans (a step column holding 1e10), and a CSV or JSONL line longer than pyarrow's read
block is read, not refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from grpolab.audit.aggregate import _missing_steps
from grpolab.audit.sources import BATCH_BYTES, TEXT_BLOCK_BYTES, parquet_rows_within, prompt_keys, text_block_bytes
from grpolab.cli import main

ROWS, G = 40_000, 4


def _write(path: Path, id_repeats: int) -> Path:
    table = pa.table({
        "step": [i // 400 for i in range(ROWS)],
        "prompt_id": [f"p{i // G:05d}" * id_repeats for i in range(ROWS)],
        "reward": [float(i % 3 == 0) for i in range(ROWS)],
    })
    pq.write_table(table, path, compression="zstd")
    return path


def _audit_json(path: Path, address_space: int | None = None) -> dict:
    """``grpolab audit PATH --json`` in a subprocess (under ``RLIMIT_AS`` = ``address_space`` bytes)."""
    limit = (f"resource.setrlimit(resource.RLIMIT_AS, ({address_space}, resource.RLIM_INFINITY)); "
             if address_space else "")
    code = (f"import resource, sys; {limit}from grpolab.cli import main; "
            f"sys.exit(main(['audit', {str(path)!r}, '--json']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_small_file_of_long_prompt_ids_is_audited_under_2_gib(tmp_path: Path) -> None:
    long_ids = _write(tmp_path / "long.parquet", id_repeats=2000)  # 12 KB ids: ~480 MB decoded
    assert long_ids.stat().st_size < 500_000
    assert pq.ParquetFile(long_ids).metadata.row_group(0).total_byte_size > 400_000_000
    short_ids = _write(tmp_path / "short.parquet", id_repeats=1)
    bounded = _audit_json(long_ids, address_space=2 << 30)
    reference = _audit_json(short_ids)
    for report in (bounded, reference):
        report.pop("input", None)
    assert bounded == reference  # the same groups and statistics as with short ids


def test_parquet_batches_are_sized_by_the_row_groups_uncompressed_bytes(tmp_path: Path) -> None:
    metadata = pq.ParquetFile(_write(tmp_path / "long.parquet", id_repeats=2000)).metadata
    rows = parquet_rows_within(metadata, ["step", "prompt_id", "reward"], BATCH_BYTES)
    per_row = metadata.row_group(0).total_byte_size / metadata.row_group(0).num_rows
    assert 1 <= rows <= BATCH_BYTES / per_row * 1.01 and rows < ROWS


def test_long_prompt_ids_group_by_digest_and_short_ones_stay() -> None:
    keys = prompt_keys(pa.array(["a" * 100, "b", "a" * 100, None, "a" * 99 + "c"])).to_pylist()
    assert keys[0] == keys[2] != keys[4] and keys[0].startswith("sha1:") and keys[1] == "b" and keys[3] is None
    assert prompt_keys(pa.array(["x", "y"])).to_pylist() == ["x", "y"]


def test_a_step_column_holding_1e10_is_audited_in_bounded_memory(tmp_path: Path) -> None:
    # was: a list of every step from 1 to 1e10 for the missing-steps warning, killed at 24 GB (or, under a limit,
    # "ran out of memory; lower the sizes of its batches ... runs resume from their last checkpoint")
    table = tmp_path / "far.csv"
    table.write_text("step,prompt_id,reward\n1,a,1\n1,a,0\n10000000000,b,1\n10000000000,b,0\n")
    report = _audit_json(table, address_space=2 << 30)
    assert [s["step"] for s in report["per_step"]] == [1, 10_000_000_000]
    assert report["groups"] == 2 and report["completions"] == 4
    (warning,) = [w for w in report["warnings"] if "missing" in w]
    assert warning.startswith("9,999,999,998 of 10,000,000,000 steps are missing from the logs (2, 3, 4, 5, 6, 7, "
                              "8, 9, ...)")


def test_missing_steps_are_counted_not_listed() -> None:
    assert _missing_steps([1, 3, 7], None) == (4, [2, 4, 5, 6])
    assert _missing_steps([3, 5], 1) == (3, [1, 2, 4])
    assert _missing_steps([0, 1, 2, 2], 1) == (0, [])
    assert _missing_steps([1, 10**18], 1, shown=3) == (10**18 - 2, [2, 3, 4])
    assert _missing_steps([], 1) == (0, [])


def test_empty_steps_are_one_line_naming_the_file_and_row(tmp_path: Path, capsys) -> None:
    # was: NaN cast to the smallest int64, then a step range from -9.2e18: out of memory
    path = tmp_path / "null.parquet"
    pq.write_table(pa.table({"step": pa.array([1, None, 3, None], pa.int64()), "prompt_id": ["a", "a", "b", "b"],
                             "reward": [1.0, 0.0, 1.0, 0.0]}), path)
    assert main(["audit", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err and "'step' is empty in 2 rows (the first is row 2)" in err


def _long_line_tables(folder: Path) -> list[Path]:
    """A JSONL and a CSV table whose first two rows hold a 17 MiB prompt id (past the 16 MiB read block)."""
    big = "x" * (17 << 20)
    jsonl, csv = folder / "long.jsonl", folder / "long.csv"
    jsonl.write_text("".join(json.dumps({"step": 1, "prompt_id": big if i < 2 else "b", "reward": i % 2}) + "\n"
                             for i in range(4)))
    csv.write_text("step,prompt_id,reward\n" + "".join(f"1,{big if i < 2 else 'b'},{i % 2}\n" for i in range(4)))
    return [jsonl, csv]


def test_lines_longer_than_the_read_block_are_audited(tmp_path: Path) -> None:
    # was: "cannot read it as json: straddling object straddles two block boundaries", for any line over 16 MiB
    for path in _long_line_tables(tmp_path):
        report = _audit_json(path, address_space=2 << 30)
        assert (report["groups"], report["completions"], report["uniform"]) == (2, 4, 0.0), path
        assert TEXT_BLOCK_BYTES < text_block_bytes(path) <= 3 * TEXT_BLOCK_BYTES


def test_the_read_block_grows_only_past_the_longest_line(tmp_path: Path) -> None:
    short = tmp_path / "short.csv"
    short.write_text("a,b\n1,2\n")
    assert text_block_bytes(short) == TEXT_BLOCK_BYTES
    line = tmp_path / "line.csv"
    line.write_bytes(b"a\n" + b"y" * 40 + b"\n" + b"z" * 10)  # blocks of 16 bytes: the 41-byte line spans three
    assert text_block_bytes(line, least=16) == 64 and re.fullmatch(r"a\ny+\nz+", line.read_text())


def _nested_log(path: Path, levels: int) -> Path:
    """Two groups of 4 (the first all right, the second mixed), the first line holding an unused field nested
    ``levels`` lists deep (2 x ``levels`` bytes)."""
    rows = [{"step": 1, "prompt_id": i // 4, "reward": float(i < 4 or i % 2)} for i in range(8)]
    lines = [json.dumps(row) for row in rows]
    lines[0] = lines[0][:-1] + ', "trace": ' + "[" * levels + "]" * levels + "}"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_unused_deeply_nested_json_field_is_never_parsed(tmp_path: Path, monkeypatch) -> None:
    # was: a 20 KB line of 10,000 nested lists took 101 s (pyarrow inferred every field's type), 40 KB segfaulted
    from grpolab.audit import jsonl

    log = _nested_log(tmp_path / "nested.jsonl", 20_000)
    assert log.stat().st_size > 40_000
    parsed: list[str] = []
    loads = json.loads
    monkeypatch.setattr(jsonl.json, "loads", lambda text, *a, **k: parsed.append(text) or loads(text, *a, **k))
    schema = jsonl.json_schema(log, TEXT_BLOCK_BYTES)
    assert schema.names == ["step", "prompt_id", "reward", "trace"] and schema.field("trace").metadata
    assert parsed and max(len(text) for text in parsed) < 100  # the 40 KB value was skipped, not parsed
    report = _audit_json(log)  # a subprocess: a native crash fails this test instead of ending the session
    assert (report["groups"], report["completions"], report["uniform"]) == (2, 8, 0.5)


def test_an_audited_column_nested_too_deep_is_one_line(tmp_path: Path, capsys) -> None:
    log = tmp_path / "deep-ids.jsonl"
    deep = "[" * 100 + "1" + "]" * 100
    log.write_text("".join(f'{{"step": 1, "prompt_id": {deep}, "reward": {i % 2}}}\n' for i in range(4)))
    assert main(["audit", str(log)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'prompt_id' holds values nested deeper than 64 levels" in err, err


def test_an_unused_json_field_of_no_one_type_is_skipped_and_an_audited_one_is_one_line(tmp_path: Path,
                                                                                          capsys) -> None:
    log = tmp_path / "mixed.jsonl"
    rows = [{"step": 1, "prompt_id": i // 2, "reward": float(i % 2), "note": 2**70 if i == 0 else "text"}
            for i in range(4)]
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["audit", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == 2
    assert main(["audit", str(log), "--reward-column", "note"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the column 'note' has no one type" in err, err
