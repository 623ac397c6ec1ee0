"""Memory estimates and what is available (grpolab.engine.memory), and the refusals of settings that cannot fit
(grpolab.engine.fit) as a user meets them at the command line: one line, exit code 2, nothing allocated."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grpolab.cli import main
from grpolab.engine import memory
from grpolab.errors import UserError
from grpolab.models import load_policy

SHAPE = memory.ModelShape(layers=30, heads=9, kv_heads=3, head_dim=64, hidden=576, vocab=49152, context=8192)
TINY = ["--steps", "1", "--prompts-per-step", "2", "--eval-limit", "2", "--eval-samples", "0", "--no-eval-start",
        "--checkpoint-every", "0", "--threads", "1", "--no-progress"]


def test_kv_cache_bytes_is_layers_x_2_x_heads_x_head_dim_x_dtype_x_rows_x_length() -> None:
    assert memory.kv_cache_bytes(SHAPE, rows=1, length=1) == 30 * 2 * 3 * 64 * 4
    assert memory.kv_cache_bytes(SHAPE, rows=16 * 64, length=612, dtype_bytes=2) == 30 * 2 * 3 * 64 * 2 * 1024 * 612


def test_sampling_and_update_estimates_grow_with_every_setting() -> None:
    base = memory.sampling_bytes(SHAPE, 16, 64, 100, 512)
    assert base > memory.kv_cache_bytes(SHAPE, 16 * 64, 612)
    for bigger in ((32, 64, 100, 512), (16, 128, 100, 512), (16, 64, 200, 512), (16, 64, 100, 1024)):
        assert memory.sampling_bytes(SHAPE, *bigger) > base
    assert memory.update_bytes(SHAPE, 64, 512) == 2 * 64 * 512 * 49152 * 4  # the logits and their gradient, float32
    assert memory.update_bytes(SHAPE, 64, 512, 2) == 2 * 64 * 512 * 49152 * 2  # under bfloat16 autocast


def test_a_bfloat16_kv_cache_halves_the_rows_cache_in_the_sampling_estimate() -> None:
    full = memory.sampling_bytes(SHAPE, 16, 64, 100, 512)
    half = memory.sampling_bytes(SHAPE, 16, 64, 100, 512, kv_dtype_bytes=2)
    assert full - half == memory.kv_cache_bytes(SHAPE, 16 * 64, 612) // 2  # the prompts' own cache stays float32


def test_the_shape_and_context_of_the_embedded_model() -> None:
    shape = memory.model_shape(load_policy("embedded").model)
    assert shape == memory.ModelShape(layers=2, heads=4, kv_heads=4, head_dim=32, hidden=128, vocab=32, context=128,
                                      intermediate=256, gated=True)


def test_available_memory_sees_an_address_space_limit() -> None:
    code = ("import resource; from grpolab.engine.memory import available_bytes; "
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); print(available_bytes())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert 0 <= int(done.stdout) < 3 << 30
    assert (memory.available_bytes() or 0) > 0
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # only the child was limited


def test_refusal_names_need_available_and_settings() -> None:
    with pytest.raises(UserError, match=r"^a step needs about 1.5 GiB of memory, but only 512 MiB is available; "
                                        r"lower --group-size$"):
        memory.refuse_unless_fits(3 << 29, "a step", "--group-size", available=512 << 20)
    memory.refuse_unless_fits(1 << 20, "a step", "--group-size", available=512 << 20)  # fits: no error


def _one_line(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(("flags", "needles"), [
    (["--group-size", "100000", "--prompts-per-step", "16"],
     ("a step of 16 prompts x 100000 completions", "lower --group-size, --prompts-per-step, --max-new-tokens")),
    (["--eval-samples", "100000"], ("sampling 100000 completions per prompt of the evaluation split",
                                    "lower --eval-samples or --max-new-tokens")),
    (["--max-new-tokens", "100000"], ("max_new_tokens 100000 leaves no room for a prompt in the model's context of "
                                      "128 tokens; lower --max-new-tokens below 128",)),
])
def test_train_refuses_settings_that_cannot_fit_in_one_line(flags: list[str], needles: tuple[str, ...],
                                                            tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 30)  # 1 GiB free
    line = _one_line(["train", "--out", str(tmp_path / "run"), *TINY, *flags], capsys)
    assert line.startswith("grpolab train: error: ")
    for needle in needles:
        assert needle in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before the first step


def test_eval_refuses_samples_that_cannot_fit_in_one_line(capsys: pytest.CaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 30)
    line = _one_line(["eval", "--limit", "2", "--eval-samples", "100000", "--max-new-tokens", "100"], capsys)
    assert "needs about" in line and "lower --eval-samples or --max-new-tokens" in line


def test_most_prompts_beyond_the_context_is_a_setting_to_fix(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # the reverse task's prompts have 6 to 9 tokens: 124 new tokens leave room for 4
    line = _one_line(["train", "--out", str(tmp_path / "run"), *TINY, "--max-new-tokens", "124"], capsys)
    assert "of the train split are longer than the 4 tokens the model's context of 128 leaves beside " \
           "max_new_tokens 124 (median prompt: " in line and "lower --max-new-tokens to at most 12" in line


def test_the_sampler_budget_is_a_share_of_a_gpus_memory_and_the_hosts_constant_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU with 80 GB free and 6 GB cached by PyTorch's allocator, one sampling pass may use a quarter of the
    86 GB; a GPU with less free memory than the host's budget keeps the host's 1 GiB; the CPU keeps 1 GiB."""
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (80 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *_: 10 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_: 4 * gib)
    gpu = torch.device("cuda", 0)
    assert memory.available_bytes(gpu) == 86 * gib
    assert memory.sampler_budget(gpu) == int(memory.GPU_SAMPLER_SHARE * 86 * gib)
    assert memory.sampler_budget(torch.device("cpu")) == memory.SAMPLER_BUDGET_BYTES
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *_: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *_: 0)
    assert memory.sampler_budget(gpu) == memory.SAMPLER_BUDGET_BYTES


def test_smollm2_at_p64_g8_samples_in_one_pass_on_an_80_gb_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """SmolLM2-135M's shape, 64 prompts x 8 completions of 128 prompt + 384 new tokens: the host's budget splits
    it into passes, a quarter of 80 GB takes it whole."""
    need = memory.sampling_bytes(SHAPE, 64, 8, 128, 384)
    assert need > memory.SAMPLER_BUDGET_BYTES
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *_: (80 << 30, 80 << 30))
    assert need <= memory.sampler_budget(torch.device("cuda", 0))


def test_a_steps_sampling_on_a_gpu_counts_the_cache_in_the_dtype_the_sampler_keeps_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the lean sampler's static step keeps a bfloat16 cache where its weights are bfloat16; the host's
    dynamic step a float32 one (the device is faked: only the arithmetic runs)."""
    from grpolab.engine import fit

    model = load_policy("embedded").model
    monkeypatch.setattr(memory, "sampler_budget", lambda device=None, reusable=0: 1 << 30)
    host = fit._sampling_need(model, 4, 8, 20, 32, "bfloat16")
    monkeypatch.setattr(fit, "model_device", lambda model: torch.device("cuda"))
    assert fit._sampling_need(model, 4, 8, 20, 32, "float32") == host  # float32 weights: a float32 cache
    half = host - memory.kv_cache_bytes(memory.model_shape(model), 4 * 8, 20 + 32, 2)
    assert fit._sampling_need(model, 4, 8, 20, 32, "bfloat16") == half
