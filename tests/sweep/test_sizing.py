"""A comparison's size before it starts: the runs its plan holds (counted, not built), the memory a worker needs,
the memory this process is allowed (cgroup limit, else the machine's) and the workers that fit in it."""

from __future__ import annotations

import concurrent.futures
import warnings
from pathlib import Path

import pytest
from tests.optional_models import needs_smollm2

from grpolab.cli import main
from grpolab.config import CompareConfig, TrainConfig
from grpolab.sweep import local, sizing
from grpolab.sweep.plan import plan_cells, plan_lr_grid, plan_runs
from grpolab.sweep.variants import parse_vary

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("lrs", "vary", "rounds"), [("1e-4", "", 2), ("1e-4,3e-4,1e-3", "", 0),
                                                     ("1e-4,3e-4,1e-3", "", 3),
                                                     ("1e-4,3e-4", "max_grad_norm=0,1;beta=0,0.01,0.1", 2)])
def test_the_counted_plan_equals_the_planned_runs(tmp_path: Path, lrs: str, vary: str, rounds: int) -> None:
    # was: the lr bracketing rounds were left out of the count (up to seeds x rounds more runs per cell)
    sweep = CompareConfig(estimators="sign,dr_grpo", group_sizes="2,4", seeds=3, lrs=lrs, selection_seeds=2,
                          vary=vary, lr_bracket_rounds=rounds)
    base, variants = TrainConfig(steps=2), parse_vary(vary)
    cells = plan_cells(sweep.estimator_list, sweep.group_size_list, variants)
    planned = plan_runs(base, sweep.estimator_list, sweep.seed_list, sweep.group_size_list, tmp_path,
                        variants=variants)
    if len(sweep.lr_list) > 1:  # each round extends a grid by one lr at most: here, always upward
        grown = sweep.lr_list + [sweep.lr_list[-1] * 10 ** (i + 1) for i in range(rounds)]
        planned += plan_lr_grid(base, {cell: grown for cell in cells}, sweep.selection_seed_list, tmp_path)
    assert sizing.plan_runs_count(sweep) == len(planned) > 0


def test_a_plan_past_the_bound_is_refused_in_one_line_before_it_is_built(tmp_path: Path, capsys) -> None:
    # was: a 12-million-run plan built for 90 s in 3.9 GB with no output
    out = tmp_path / "c"
    sizes = ",".join(str(g) for g in range(2, 400))
    assert main(["compare", "--seeds", "1000", "--group-sizes", sizes, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "the plan holds 1,607,920 runs" in err and "--large-plan" in err, repr(err)
    assert not out.exists()


def test_memory_limit_reads_cgroup_v2_then_v1(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    (tmp_path / "sys" / "job").mkdir(parents=True)
    membership.write_text("0::/job\n")
    (tmp_path / "sys" / "job" / "memory.max").write_text("3221225472\n")
    assert sizing._cgroup_limit(membership, tmp_path / "sys") == 3 << 30
    (tmp_path / "sys" / "job" / "memory.max").write_text("max\n")
    assert sizing._cgroup_limit(membership, tmp_path / "sys") is None
    membership.write_text("4:memory:/box\n0::/\n")
    (tmp_path / "sys" / "memory" / "box").mkdir(parents=True)
    (tmp_path / "sys" / "memory" / "box" / "memory.limit_in_bytes").write_text("2147483648\n")
    assert sizing._cgroup_limit(membership, tmp_path / "sys") == 2 << 30
    (tmp_path / "sys" / "memory" / "box" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert sizing._cgroup_limit(membership, tmp_path / "sys") is None  # v1's "no limit"
    assert sizing.memory_limit_bytes() > 0  # this machine: its cgroup's limit or its total memory


def test_workers_are_lowered_to_what_the_limit_holds_with_one_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sizing.fit_workers(4, 1 << 30, 8 << 30) == 4
        assert sizing.fit_workers(4, 1 << 30, None) == 4
    with pytest.warns(UserWarning, match=r"running 3 worker\(s\) at once instead of 12: each needs about 1 GiB and "
                                         r"this process is allowed 3\.5 GiB") as caught:
        assert sizing.fit_workers(12, 1 << 30, 7 << 29) == 3
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    with pytest.warns(UserWarning, match="running 1 worker"):
        assert sizing.fit_workers(2, 1 << 30, 1 << 20) == 1  # at least one


def test_a_worker_needs_its_base_plus_copies_of_the_weights() -> None:
    embedded = sizing.worker_bytes([TrainConfig()])
    assert sizing.WORKER_BASE_BYTES < embedded < sizing.WORKER_BASE_BYTES + (64 << 20)
    assert sizing.worker_bytes([TrainConfig(model="org/not-local")]) == sizing.WORKER_BASE_BYTES


def test_the_weights_count_as_loaded_in_float32_not_as_stored(tmp_path: Path) -> None:
    """A bfloat16 file of 3 x 5 + 7 parameters loads as 22 float32 values: 88 bytes a copy, whatever the file's
    size (its header included)."""
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(3, 5, dtype=torch.bfloat16), "b": torch.zeros(7, dtype=torch.bfloat16)},
              str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text("{}")
    sizing._weights_bytes.cache_clear()
    assert sizing._weights_bytes(str(tmp_path)) == 4 * 22
    assert sizing.worker_bytes([TrainConfig(model=str(tmp_path))]) == sizing.WORKER_BASE_BYTES + 4 * 4 * 22


@needs_smollm2
def test_smollm2_counts_its_gguf_parameters_in_float32() -> None:
    """The quantized GGUF file is 98 MB; its 134,515,008 parameters load as 538 MB of float32."""
    from grpolab.models import SMOLLM2

    assert sizing._weights_bytes(SMOLLM2) == 4 * 134_515_008


def test_the_local_pool_starts_only_the_workers_the_memory_holds(tmp_path: Path, monkeypatch) -> None:
    # was: 12 workers each passed their own memory check (each saw the whole machine) and together used 6.5 GB;
    # in a 3 GB cgroup the sweep was killed without a word
    started: list[int] = []

    def pool(workers, progress, devices):
        started.append(workers)
        return concurrent.futures.ThreadPoolExecutor(workers)

    monkeypatch.setattr(local, "worker_pool", pool)
    monkeypatch.setattr(local, "post_progress", lambda spec: {"run_id": spec.run_id, "ok": True})
    monkeypatch.setattr(local, "memory_limit_bytes", lambda: 3 << 30)
    monkeypatch.setattr(local, "worker_bytes", lambda configs: 1 << 30)
    specs = plan_runs(TrainConfig(steps=1, device="cpu"), ["sign"], list(range(12)), [2], tmp_path)
    with pytest.warns(UserWarning, match=r"running 3 worker\(s\) at once instead of 12"):
        outcomes = local.run_local(specs, 12, lambda event: None, gpus_per_run=0)
    assert started == [3] and len(outcomes) == 12


def test_the_plan_line_names_the_runs_and_the_workers_memory_once(capsys) -> None:
    from grpolab.commands import compare as command

    sweep = CompareConfig(estimators="sign,dr_grpo", group_sizes="2", seeds=2, lrs="1e-4", workers=2)
    line = command._plan_line(sweep, TrainConfig(), large=False)
    per_worker = sizing.worker_bytes([TrainConfig()])
    assert line.startswith("plan: 4 run(s), an estimated ") and " x 2 worker(s) = " in line and " allowed" in line, line
    assert str(round(per_worker / 2**20)) in line or f"{per_worker / 2**20:.3g}" in line, line
    progress = command._Progress(plan=line)
    for _ in range(2):
        progress.on_event({"phase": "runs", "total": 4, "already": 0})
        progress.close()
    assert capsys.readouterr().err.count("plan: 4 run(s)") == 1
    large = CompareConfig(estimators="sign", group_sizes=",".join(map(str, range(2, 30))), seeds=1000, lrs="1e-4")
    assert command._plan_line(large, TrainConfig(), large=True).startswith("plan: 28,000 run(s)")
