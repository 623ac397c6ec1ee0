"""``grpolab.checksums``: a sealed folder matches its seal until any of its files changes, goes or is added to the
seal's list; a missing or damaged seal is named."""

from __future__ import annotations

import hashlib
from pathlib import Path

from grpolab.checksums import SEAL, file_sha256, seal_folder, seal_problem


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "sealed"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 5000)
    (folder / "sub" / "config.json").write_text("{}")
    seal_folder(folder)
    return folder


def test_a_sealed_folder_matches_until_a_bit_flips(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert seal_problem(folder, required=("model.safetensors", "sub/config.json")) is None
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0x40
    (folder / "model.safetensors").write_bytes(bytes(data))
    assert seal_problem(folder) == "model.safetensors does not match its checksum"


def test_a_missing_file_or_seal_and_a_damaged_seal_are_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "sub" / "config.json").unlink()
    assert seal_problem(folder) == "sub/config.json is missing"
    assert seal_problem(folder, required=("trainer_state.json",)) == f"its {SEAL} is damaged"
    (folder / SEAL).write_text("[1, 2")
    assert seal_problem(folder) == f"its {SEAL} is damaged"
    (folder / SEAL).unlink()
    assert seal_problem(folder) == f"it has no {SEAL}: its save never finished"


def test_file_sha256_reads_in_chunks_as_one_hash(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * ((1 << 20) * 2 + 7))  # three chunks of 1 MiB
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
