"""Running out of memory at the command line: one line naming the command's settings to lower, exit code 2,
no traceback; other errors are left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from grpolab import cli
from grpolab.commands import estimators

ALLOCATOR = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
             "allocate 1574834406 bytes. Error code 12 (Cannot allocate memory)")


@pytest.mark.parametrize(("error", "size"), [
    (RuntimeError(ALLOCATOR), " allocating 1.47 GiB"),
    (MemoryError(), ""),
])
def test_out_of_memory_is_one_line_naming_the_settings(error: BaseException, size: str,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture) -> None:
    def run(args):
        raise error

    monkeypatch.setattr(estimators, "run", run)
    monkeypatch.setitem(cli.MEMORY_SETTINGS, "estimators", "--group-size or --max-new-tokens")
    assert cli.main(["estimators"]) == 2
    assert capsys.readouterr().err == (f"grpolab estimators: error: ran out of memory{size}; lower --group-size or "
                                       "--max-new-tokens (or free memory), then rerun\n")


def test_out_of_gpu_memory_is_one_line_that_says_gpu(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture) -> None:
    def run(args):  # torch's own text on a full H100
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
                                     "79.19 GiB of which 3.06 MiB is free.")

    monkeypatch.setattr(estimators, "run", run)
    monkeypatch.setitem(cli.MEMORY_SETTINGS, "estimators", "--group-size")
    assert cli.main(["estimators"]) == 2
    assert capsys.readouterr().err == ("grpolab estimators: error: ran out of GPU memory allocating 20.00 MiB; lower "
                                       "--group-size (or free the GPU, or give each run its own GPU), then rerun\n")


@pytest.mark.parametrize(("command", "said"), [
    ("mechanism", "lower --samples or --prompts (or --parts passk,updates, which sample nothing) (or free memory), "
                  "then rerun\n"),
    ("audit", "lower the files audited at once (audit a folder's tables one by one) (or free memory), then rerun\n"),
    ("train", "(or free memory), then rerun with --resume and the same --out to continue from the last checkpoint\n"),
])
def test_each_command_names_its_own_settings(command: str, said: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture, tmp_path) -> None:
    # was: mechanism and audit said "lower the sizes of its batches ... (runs resume from their last checkpoint)",
    # settings and checkpoints neither has
    import importlib

    module = importlib.import_module(cli.COMMANDS[command][0])

    def run(args):
        raise MemoryError

    monkeypatch.setattr(module, "run", run)
    argv = {"mechanism": [str(tmp_path)], "audit": [str(tmp_path)], "train": []}[command]
    assert cli.main([command, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"grpolab {command}: error: ran out of memory; lower ") and err.endswith(said), err


def test_other_runtime_errors_still_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(args):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(estimators, "run", run)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        cli.main(["estimators"])


def test_a_real_allocation_beyond_the_address_space_limit(tmp_path) -> None:
    code = """
import resource, sys, torch
from grpolab import cli
from grpolab.commands import estimators
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))
estimators.run = lambda args: torch.ones(8 << 30, dtype=torch.uint8)
sys.exit(cli.main(["estimators"]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("grpolab estimators: error: ran out of memory allocating 8 GiB; lower the sizes "
                                  "of its batches"), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
