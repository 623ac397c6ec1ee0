"""scripts/make_embedded_model.py: deterministic (a reduced build twice gives the same bytes), never writes
over an existing model, and its reverse SFT labels follow the documented per-family rates."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_embedded_model.py"
REDUCED = ["--steps", "12", "--batch-size", "8", "--hidden", "32", "--layers", "1", "--heads", "2",
           "--skip-competence"]


def _script():
    spec = importlib.util.spec_from_file_location("make_embedded_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *REDUCED, *extra],
                          capture_output=True, text=True, timeout=300)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("task", ["reverse", "arith"])
def test_reduced_build_is_deterministic(task: str, tmp_path: Path) -> None:
    first, second = _build(tmp_path / "a", "--task", task), _build(tmp_path / "b", "--task", task)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:]
    assert _sha256(tmp_path / "a" / "model.safetensors") == _sha256(tmp_path / "b" / "model.safetensors")
    other_seed = _build(tmp_path / "c", "--task", task, "--seed", "1")
    assert other_seed.returncode == 0
    assert _sha256(tmp_path / "c" / "model.safetensors") != _sha256(tmp_path / "a" / "model.safetensors")


def _build_here(out: Path, *extra: str) -> None:
    """The script's ``main`` in this process, with the torch settings it makes global (threads, deterministic
    algorithms, the random state) restored afterwards."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    state = torch.random.get_rng_state()
    try:
        _script().main(["--out", str(out), *REDUCED, *extra])
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        torch.random.set_rng_state(state)


def test_never_writes_over_an_existing_model(tmp_path: Path) -> None:
    """In this process: the refusal is the script's own check, not its process (the builds above are
    subprocesses, so that their sameness holds across interpreters)."""
    _build_here(tmp_path / "a")
    before = _sha256(tmp_path / "a" / "model.safetensors")
    with pytest.raises(SystemExit, match="already holds a model"):
        _build_here(tmp_path / "a", "--seed", "1")
    assert _sha256(tmp_path / "a" / "model.safetensors") == before
    _build_here(tmp_path / "a", "--seed", "1", "--force")
    assert _sha256(tmp_path / "a" / "model.safetensors") != before


def test_default_output_is_not_the_shipped_model() -> None:
    args = _script().parse_args([])
    assert "assets" not in str(args.out) and args.task == "reverse" and args.steps == 1500


def test_reverse_labels_follow_the_family_rates() -> None:
    script = _script()
    examples = script.reverse_sft_examples(0, 20_000)
    counts: Counter = Counter()
    for prompt, label in examples:
        digits, marker = prompt[:-2], prompt[-2]
        assert label in (digits, digits[::-1])
        counts[(marker, len(digits), label == digits[::-1])] += 1
    for marker, rates in script.REVERSE_RATE.items():
        for length, rate in rates.items():
            total = counts[(marker, length, True)] + counts[(marker, length, False)]
            assert abs(counts[(marker, length, True)] / total - rate) < 0.04, (marker, length)
    assert examples == script.reverse_sft_examples(0, 20_000)
