"""The audit's memory is bounded by bytes, not rows: a small zstd Parquet file of long prompt ids (tens of
kilobytes on disk, hundreds of megabytes decoded) is audited under a 2 GiB address-space limit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from grpolab.audit.sources import BATCH_BYTES, parquet_rows_within, prompt_keys

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
