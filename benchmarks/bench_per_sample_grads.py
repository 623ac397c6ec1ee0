"""Per-sample gradients: ``torch.func.vmap(grad(...))`` over ``functional_call`` against the plain loop.

``grpolab.gradients.per_completion_gradients`` computes one row per completion with one forward + backward
each. The vectorised alternative does the same rows in one call, but only for rows of equal length and
without an attention mask. This benchmark times both on the default model (the embedded model, all its
parameters) for 32 rows of 16 random token ids, 1 thread, median of interleaved repeats, and checks that the
rows agree. It is informational: the loop stays, because real completions differ in length and need masks.
``--quick``: 8 rows.
"""

from __future__ import annotations

import warnings

import torch

from _common import Row, bench_main, default_model, interleaved, median, model_label, one_thread, row

ROWS, LENGTH = 32, 16


def _log_prob(model: torch.nn.Module, params: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Summed log-probability of ids[1:] given its prefix, one unpadded row [T]."""
    from torch.func import functional_call

    logits = functional_call(model, params, (ids.unsqueeze(0),)).logits[0, :-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[1:, None]).sum()


def run(quick: bool) -> list[Row]:
    from torch.func import grad, vmap

    from grpolab.models import load_policy

    one_thread()
    name, is_embedded = default_model()
    model = load_policy(name).model.eval()
    names = [key for key, p in model.named_parameters() if p.requires_grad]
    live = dict(model.named_parameters())
    frozen = {key: live[key].detach() for key in names}
    rows, repeats = (8, 3) if quick else (ROWS, 7)
    vocab = model.config.vocab_size
    ids = torch.randint(4, vocab, (rows, LENGTH), generator=torch.Generator().manual_seed(0))
    per_row = vmap(grad(lambda params, one: _log_prob(model, params, one)), in_dims=(None, 0))
    out: dict[str, torch.Tensor] = {}

    def vectorised() -> None:
        found = per_row(frozen, ids)
        out["vmap"] = torch.cat([found[key].reshape(rows, -1) for key in names], dim=1)

    def loop() -> None:
        flat = []
        for one in ids:
            grads = torch.autograd.grad(_log_prob(model, live, one), [live[key] for key in names])
            flat.append(torch.cat([g.reshape(-1) for g in grads]))
        out["loop"] = torch.stack(flat)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")  # SDPA falls back to a slower vmap path
        times = interleaved({"vmap": vectorised, "loop": loop}, repeats=repeats)
    vmap_s, loop_s = median(times["vmap"]), median(times["loop"])
    difference = float((out["vmap"] - out["loop"]).abs().max())
    largest = float(out["loop"].abs().max())
    detail = (f"{model_label(is_embedded)}, {rows} rows x {LENGTH} tokens x {out['loop'].shape[1]:,} parameters, "
              f"1 thread, median of {repeats}: vmap {vmap_s:.3f} s, loop {loop_s:.3f} s; max |difference| "
              f"{difference:.1e} of a max |entry| {largest:.3g}")
    return [row(f"per_sample_grads_{rows}rows_loop_over_vmap", ratio=loop_s / vmap_s, unit="x", goal="info",
                met=None, detail=detail, vmap_s=round(vmap_s, 4), loop_s=round(loop_s, 4),
                max_abs_difference=difference, max_abs_entry=largest)]


if __name__ == "__main__":
    raise SystemExit(bench_main(run))
