"""Spectrum of a per-completion gradient matrix at scale: 1,024 rows x 1M parameters, float32 (4 GiB).

The matrix is random low-rank-plus-noise, U [R, 8] diag(s) V^T [8, M] + 0.1 N(0, 1) / sqrt(M), built column chunk by
column chunk so that only the matrix itself is resident. ``grpolab.diagnostics.spectrum`` (method "auto",
which takes the Gram path here) is timed with one torch thread and with two, median of 3 repeats each; goal
< 10 s. A third row times the approximate alternative this repo uses for gradients that do not fit: a seeded
CountSketch of every row to k = 4,096 columns followed by an exact SVD. ``--quick``: 256 x 200,000, 1 repeat.
"""

from __future__ import annotations

import torch

from _common import Row, bench_main, median, row, timed

RANK, NOISE = 8, 0.1  # noise singular values ~ NOISE (entries NOISE / sqrt(M))
GOAL_SECONDS = 10.0


def low_rank_plus_noise(rows: int, columns: int, seed: int = 0) -> torch.Tensor:
    """[rows, columns] float32: rank-8 signal with singular values 100..30 plus Gaussian noise of spectral size ~0.1."""
    generator = torch.Generator().manual_seed(seed)
    left = torch.linalg.qr(torch.randn(rows, RANK, generator=generator))[0] * torch.linspace(100, 30, RANK)
    out = torch.empty(rows, columns, dtype=torch.float32)
    width = 1 << 16
    for start in range(0, columns, width):
        stop = min(start + width, columns)
        right = torch.randn(RANK, stop - start, generator=generator) / columns**0.5
        out[:, start:stop] = left @ right + NOISE / columns**0.5 * torch.randn(rows, stop - start, generator=generator)
    return out


def _time_spectrum(matrix: torch.Tensor, threads: int, repeats: int) -> tuple[float, dict]:
    from grpolab.diagnostics import spectrum

    torch.set_num_threads(threads)
    result: dict = {}

    def call() -> None:
        result.update(spectrum(matrix))

    return median([timed(call) for _ in range(repeats)]), result


def _time_sketch_then_svd(matrix: torch.Tensor, k: int, repeats: int) -> tuple[float, dict]:
    from grpolab.diagnostics import spectrum
    from grpolab.gradients import CountSketch

    torch.set_num_threads(1)
    sketch = CountSketch(k, seed=0)
    result: dict = {}

    def call() -> None:
        sketched = torch.stack([sketch.project([r]) for r in matrix])
        result.update(spectrum(sketched, method="svd"))

    sketch.project([matrix[0]])  # draw the hash once, outside the timing (it is cached across rows and steps)
    return median([timed(call) for _ in range(repeats)]), result


def run(quick: bool) -> list[Row]:
    rows, columns, repeats = (256, 200_000, 1) if quick else (1024, 1_000_000, 3)
    matrix = low_rank_plus_noise(rows, columns)
    shape = f"{rows} x {columns:,} float32, median of {repeats}"
    results, exact = [], {}
    for threads in (1, 2):
        seconds, found = _time_spectrum(matrix, threads, repeats)
        exact = found
        detail = f"{shape}, {threads} thread(s), method {found['method']}, erank {found['effective_rank']:.2f}"
        results.append(row(f"spectrum_{rows}x{columns}_{threads}thread", value=seconds, unit="s",
                           goal=f"< {GOAL_SECONDS:g}", met=seconds < GOAL_SECONDS, detail=detail))
    k = 4096
    seconds, found = _time_sketch_then_svd(matrix, k, repeats)
    detail = (f"{rows} x {columns:,} -> {rows} x {k}, 1 thread, median of {repeats}; approximate: erank "
              f"{found['effective_rank']:.2f} vs exact {exact['effective_rank']:.2f}, stable rank "
              f"{found['stable_rank']:.3f} vs {exact['stable_rank']:.3f}")
    results.append(row(f"countsketch{k}_then_svd_{rows}x{columns}_1thread", value=seconds, unit="s",
                       goal=f"< {GOAL_SECONDS:g}", met=seconds < GOAL_SECONDS, detail=detail))
    torch.set_num_threads(1)
    return results


if __name__ == "__main__":
    raise SystemExit(bench_main(run))
