"""The GPU numbers check: grpolab's bfloat16 and CUDA paths checked by numbers against the CPU's float32, and the
sampler's path and speed floor, in one command with a table (docs/gpu.md).

Parts (each prints its rows; the script exits non-zero when any row fails its bound):

1. ``sampler``: the embedded model on the device samples 16 prompts x 4 completions (temperature 1) with the lean
   decoder in float32 and in bfloat16; each rollout's log-probs of its own tokens against the float32
   transformers forward on the CPU (``token_logprobs``). Bounds: float32 max |gap| <= 1e-3 (the CPU's own test
   holds 1e-4; CUDA kernels sum in other orders), bfloat16 mean |gap| <= 0.05 and max <= 0.5 (the CPU test's
   bounds). On CUDA every rollout must have replayed the CUDA graph (``Rollout.sampler == "lean graph"``, no
   fall-back).
   ``families``: the same on tiny random models of each family the lean decoder takes (Llama with Llama 3 rope
   scaling, Qwen2, Qwen3, Mistral), their logits made as peaked as a trained model's.
2. ``graph``: a model of SmolLM2-135M's shape (random weights, bfloat16 copies) samples 64 prompts x 4 x 64 new
   tokens through the CUDA graph and through the same static step run eagerly, after a warm-up of each; on CUDA
   the graph must sample at least 2x the eager step's tokens/s (the floor), and must have sampled as a graph.
3. ``update``: one update step of each estimator and loss option in ``VARIANTS`` on one batch sampled on the CPU
   (the loss options over 2 iterations, the second off-policy): plain SGD at lr 1 with the gradient clipped to norm
   1 (so the parameter change is the clipped gradient, summed over the iterations) on the device under
   bfloat16 autocast against the CPU in float32, with the estimator's per-token statistics computed on each side.
   Bounds: every change finite, cosine >= 0.99 and relative error ||d - d_cpu|| / ||d_cpu|| <= 0.15.
4. ``remedies``: a 2-step run (``Trainer``) on the device under bfloat16 with each remedy (dynamic sampling,
   group masking, curriculum, replay) and with the loss options the update rows do not reach through the trainer
   (entropy bonus, off-policy mask): it finishes, every logged number is finite, and on CUDA it sampled as a graph.

``--cpu`` runs everything on the CPU (the "device" side is the CPU under bfloat16 autocast; no graph, no speed
floor, a tiny model in part 2): ``tests/test_gpu_numbers.py`` runs it, so the script cannot rot between GPU runs.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from grpolab.config import TrainConfig  # noqa: E402
from grpolab.engine import fast_decode  # noqa: E402
from grpolab.engine.collect import collect_batch  # noqa: E402
from grpolab.engine.rollout import encode_prompts, sample, token_logprobs  # noqa: E402
from grpolab.models import load_policy  # noqa: E402
from grpolab.tasks import get_task  # noqa: E402
from grpolab.train.batch import StepBatch  # noqa: E402
from grpolab.train.shell import step_problems  # noqa: E402
from grpolab.train.step_advantages import estimator_statistics, step_advantages  # noqa: E402
from grpolab.train.update import update_policy  # noqa: E402
from grpolab.verifiers import get_verifier  # noqa: E402

FLOAT32_MAX_GAP = 1e-3
BF16_MEAN_GAP, BF16_MAX_GAP = 0.05, 0.5
GRAPH_FLOOR = 2.0
UPDATE_COSINE, UPDATE_RELATIVE = 0.99, 0.15

VARIANTS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "grpo"},
    "dr_grpo": {"advantage": "dr_grpo"},
    "rloo": {"advantage": "rloo"},
    "sign": {"advantage": "sign"},
    "reinforce": {"advantage": "reinforce"},
    "nsr": {"advantage": "nsr"},
    "passk": {"advantage": "passk"},
    "optimal_token_baseline": {"advantage": "optimal_token_baseline"},
    "beta 0.04 (reference KL)": {"advantage": "dr_grpo", "num_iterations": 2, "beta": 0.04},
    "epsilon_high 0.28": {"advantage": "dr_grpo", "num_iterations": 2, "epsilon_high": 0.28},
    "dual_clip_c 3": {"advantage": "dr_grpo", "num_iterations": 2, "dual_clip_c": 3.0},
    "cispo": {"advantage": "dr_grpo", "num_iterations": 2, "policy_loss": "cispo"},
    "sapo": {"advantage": "dr_grpo", "num_iterations": 2, "policy_loss": "sapo"},
    "luspo": {"advantage": "dr_grpo", "num_iterations": 2, "policy_loss": "luspo"},
    "vespo": {"advantage": "dr_grpo", "num_iterations": 2, "policy_loss": "vespo"},
    "sequence-level IS": {"advantage": "dr_grpo", "num_iterations": 2, "importance_sampling_level": "sequence"},
    "entropy_coef 0.01": {"advantage": "dr_grpo", "num_iterations": 2, "entropy_coef": 0.01},
    "TIS cap 2": {"advantage": "dr_grpo", "num_iterations": 2, "sampler_is_cap": 2.0},
    "off-policy mask 0.01": {"advantage": "dr_grpo", "num_iterations": 2, "off_policy_mask_threshold": 0.01},
    "mask truncated": {"advantage": "dr_grpo", "num_iterations": 2, "mask_truncated_completions": True},
    "seq_mean_token_mean aggregation": {"advantage": "grpo", "num_iterations": 2,
                                        "loss_aggregation": "seq_mean_token_mean"},
}
"""The update rows: the estimators, and the loss options each on its own (TrainConfig fields) over 2 iterations
on the batch, so that the second is off the sampling policy and the clip bounds, ratios and masks act."""

REMEDIES: dict[str, dict[str, Any]] = {
    "dynamic sampling": {"advantage": "dr_grpo", "dynamic_sampling": True},
    "group masking": {"advantage": "dr_grpo", "mask_degenerate_groups": True},
    "curriculum": {"advantage": "dr_grpo", "curriculum": True, "task_options": {"train_pool": 64}},
    "replay": {"advantage": "dr_grpo", "replay": True, "task_options": {"train_pool": 64}},
    "entropy bonus + off-policy mask": {"advantage": "sign", "entropy_coef": 0.01, "off_policy_mask_threshold": 0.01},
}
"""The 2-step runs under bfloat16 on the device."""


@dataclasses.dataclass
class Row:
    part: str
    name: str
    ok: bool
    detail: str


def _device(cpu: bool) -> torch.device:
    if cpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("gpu_numbers.py: torch sees no CUDA GPU; run with --cpu for the CPU mode")
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)


# ------------------------------------------------------------------ 1. the sampler's log-probs


def sampler_rows(device: torch.device) -> list[Row]:
    policy = load_policy("embedded")
    ids, mask = encode_prompts(policy.tokenizer, [p.prompt for p in get_task("reverse").test[:16]],
                               use_chat_template=False)
    return [_guarded_row("sampler", f"lean {dtype} vs CPU float32 transformers",
                         lambda d=dtype: _logprob_gap(policy.model, policy.tokenizer, ids, mask, d, device, tokens=24))
            for dtype in ("float32", "bfloat16")]


def _tiny(family: str, vocab: int) -> torch.nn.Module:
    """A tiny random model of ``family`` (hidden 64, 2 layers, GQA) with logits as peaked as a trained model's (the
    final norm's weight x 25) and, for Qwen3, q/k norm weights drawn around 1; embedded's vocabulary."""
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=128, tie_word_embeddings=False,
                  pad_token_id=0)
    extra = {"llama3-rope": {"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 16}},
             "mistral": {"sliding_window": None}}.get(family, {})
    name = {"llama3-rope": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mistral": "Mistral"}[family]
    config = getattr(transformers, f"{name}Config")(**common, **extra)
    model = getattr(transformers, f"{name}ForCausalLM")(config).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(25)
        for layer in model.model.layers:
            for norm in (getattr(layer.self_attn, "q_norm", None), getattr(layer.self_attn, "k_norm", None)):
                if norm is not None:
                    norm.weight.normal_(1, 0.5)
    return model


def family_rows(device: torch.device) -> list[Row]:
    """Each family the lean decoder takes, through the device's path (the CUDA graph on a GPU), in float32 and in
    bfloat16, against the CPU's float32 transformers forward; the bounds of part 1."""
    tokenizer = load_policy("embedded").tokenizer
    task = get_task("reverse")
    ids, mask = encode_prompts(tokenizer, [p.prompt for p in task.test[:8]], use_chat_template=False)
    rows = []
    for family in ("llama3-rope", "qwen2", "qwen3", "mistral"):
        model = _tiny(family, len(tokenizer))
        rows += [_guarded_row("families", f"{family} lean {dtype}",
                              lambda m=model, d=dtype: _logprob_gap(m, tokenizer, ids, mask, d, device))
                 for dtype in ("float32", "bfloat16")]
    return rows


def _logprob_gap(model: torch.nn.Module, tokenizer: Any, ids: torch.Tensor, mask: torch.Tensor, dtype: str,
                 device: torch.device, tokens: int = 16) -> tuple[bool, str]:
    """The lean sampler on ``device`` in ``dtype`` (4 samples a prompt, temperature 1): its log-probs of its own
    tokens against the float32 transformers forward on the CPU, within part 1's bounds, and on CUDA through the
    graph."""
    rollout = sample(copy.deepcopy(model).to(device), tokenizer, ids, mask, num_samples=4, max_new_tokens=tokens,
                     generator=torch.Generator().manual_seed(0), engine="lean", dtype=dtype)
    with torch.no_grad():
        reference, _ = token_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.completion_ids.shape[1])
    gap = (rollout.logprobs - reference)[rollout.completion_mask.bool()].abs()
    mean, top = float(gap.mean()), float(gap.max())
    ok = top <= FLOAT32_MAX_GAP if dtype == "float32" else (mean <= BF16_MEAN_GAP and top <= BF16_MAX_GAP)
    ok = ok and (device.type != "cuda" or (rollout.sampler == "lean graph" and not rollout.sampler_fallback))
    fallback = f" (fell back: {rollout.sampler_fallback})" if rollout.sampler_fallback else ""
    return ok, f"|gap| mean {mean:.2e}, max {top:.2e} over {gap.numel()} tokens; path {rollout.sampler}{fallback}"


# ------------------------------------------------------------------ 2. graph against eager


def _smollm2_shape(cpu: bool) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, vocab_size=512) if cpu else
             dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                  intermediate_size=1536, vocab_size=49152))
    config = LlamaConfig(**shape, max_position_embeddings=2048, rope_theta=100000.0, tie_word_embeddings=True,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


class _Tokens:
    """The two special tokens the sampler reads (the prompts are token ids already)."""

    eos_token_id, pad_token_id = 2, 0

    def batch_decode(self, ids: torch.Tensor, **_: Any) -> list[str]:
        return [""] * len(ids)


def _tokens_per_s(model: torch.nn.Module, mode: str, prompts: int, tokens: int,
                  device: torch.device) -> tuple[float, str]:
    fast_decode.step_mode = mode
    ids = torch.randint(3, model.config.vocab_size, (prompts, 32), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for attempt in range(2):  # a warm-up, then the timed pass
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        rollout = sample(model, _Tokens(), ids, mask, num_samples=4, max_new_tokens=tokens,
                         generator=torch.Generator().manual_seed(attempt), engine="lean", dtype="bfloat16")
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    return float(rollout.lengths.sum()) / seconds, rollout.sampler


def graph_rows(device: torch.device, cpu: bool) -> list[Row]:
    model = _smollm2_shape(cpu).to(device)
    prompts, tokens = (4, 8) if cpu else (64, 64)
    try:
        graph, path = _tokens_per_s(model, "auto", prompts, tokens, device)
        eager, _ = _tokens_per_s(model, "static" if device.type == "cuda" else "dynamic", prompts, tokens, device)
    finally:
        fast_decode.step_mode = "auto"
    ratio = graph / eager
    ok = device.type != "cuda" or (path == "lean graph" and ratio >= GRAPH_FLOOR)
    return [Row("graph", f"{'SmolLM2-135M shape' if not cpu else 'tiny Llama'}, {prompts} x 4 x {tokens} tokens",
                ok, f"graph path {path}: {graph:,.0f} tokens/s; eager static step {eager:,.0f} tokens/s; "
                    f"{ratio:.2f}x (floor {GRAPH_FLOOR}x on CUDA)")]


# ------------------------------------------------------------------ 3. one update step per estimator and option


def _batch(policy, config: TrainConfig) -> StepBatch:
    task = get_task(config.task)
    problems = step_problems(task, config, 1)
    scored = collect_batch(policy.model, policy.tokenizer, problems, get_verifier(task.verifier),
                           num_samples=config.group_size, max_new_tokens=24, use_chat_template=False,
                           generator=torch.Generator().manual_seed(0), dtype="float32")
    return StepBatch.from_scored(scored)


def _parameter_change(policy, config: TrainConfig, batch: StepBatch, device: torch.device) -> torch.Tensor:
    """The parameter change of one SGD step (lr 1: the clipped gradient) on ``device`` under ``config.dtype``."""
    model = copy.deepcopy(policy.model).to(device).train()
    reference = copy.deepcopy(model).eval() if config.beta > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    before = torch.cat([p.detach().float().flatten().cpu() for p in params])
    advantages = step_advantages(batch, config, max_length=24, statistics=estimator_statistics(model, batch, config))
    optimizer = torch.optim.SGD(params, lr=1.0)
    update_policy(model, optimizer, batch, advantages, config, lr=1.0, max_length=24,
                  reference=reference)
    return torch.cat([p.detach().float().flatten().cpu() for p in params]) - before


def update_rows(device: torch.device) -> list[Row]:
    policy = load_policy("embedded")
    return [_guarded_row("update", name, lambda o=overrides: _update_row(policy, o, device))
            for name, overrides in VARIANTS.items()]


def _update_row(policy, overrides: dict[str, Any], device: torch.device) -> tuple[bool, str]:
    config = TrainConfig(prompts_per_step=8, group_size=4, max_grad_norm=1.0, progress=False, **overrides)
    batch = _batch(policy, config)
    reference = _parameter_change(policy, dataclasses.replace(config, dtype="float32"), batch, torch.device("cpu"))
    change = _parameter_change(policy, dataclasses.replace(config, dtype="bfloat16"), batch, device)
    finite = bool(torch.isfinite(change).all())
    norm = float(reference.norm())
    relative = float((change - reference).norm()) / norm if norm > 0 else float(change.norm())
    cosine = float(torch.nn.functional.cosine_similarity(change, reference, dim=0)) if norm > 0 else 1.0
    ok = finite and cosine >= UPDATE_COSINE and relative <= UPDATE_RELATIVE
    return ok, f"cosine {cosine:.4f}, relative error {relative:.3f}, |d_cpu| {norm:.3e}, finite {finite}"


# ------------------------------------------------------------------ 4. remedies through the trainer


def _finite(rows: list[dict[str, Any]]) -> bool:
    return all(math.isfinite(v) for row in rows for v in row.values() if isinstance(v, float))


def remedy_rows(device: torch.device, work: Path) -> list[Row]:
    return [_guarded_row("remedies", name, lambda n=name, o=overrides: _remedy_row(n, o, device, work))
            for name, overrides in REMEDIES.items()]


def _remedy_row(name: str, overrides: dict[str, Any], device: torch.device, work: Path) -> tuple[bool, str]:
    from grpolab.train.trainer import Trainer

    run = work / name.replace(" ", "-").replace("+", "and")
    config = TrainConfig(steps=2, prompts_per_step=8, group_size=4, eval_start=False, eval_limit=8, eval_samples=2,
                         checkpoint_every=0, dtype="bfloat16", device=str(device), progress=False, lr=1e-3,
                         **overrides)
    Trainer(config, run).run()
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    sampler = json.loads((run / "summary.json").read_text()).get("sampler", {})
    graph = device.type != "cuda" or (set(sampler.get("paths", {})) == {"lean graph"} and not sampler.get("fallback"))
    ok = len(logged) == 2 and _finite(logged) and graph
    return ok, f"{len(logged)} steps, finite {_finite(logged)}, sampler {sampler}"


# ------------------------------------------------------------------ the command


def _guarded(part: str, make: Callable[[], list[Row]]) -> list[Row]:
    """A part's rows, or one failed row with the error's last line (a failing part never hides the others)."""
    try:
        return make()
    except Exception as error:  # a check reports every failure as a row
        traceback.print_exc()
        return [Row(part, "(the part raised)", False, f"{type(error).__name__}: {' '.join(str(error).split())[:300]}")]


def _guarded_row(part: str, name: str, make: Callable[[], tuple[bool, str]]) -> Row:
    """One row, or a failed row with the error's last line."""
    try:
        ok, detail = make()
    except Exception as error:  # a check reports every failure as a row
        traceback.print_exc()
        return Row(part, name, False, f"raised {type(error).__name__}: {' '.join(str(error).split())[:300]}")
    return Row(part, name, ok, detail)


def markdown(rows: list[Row], device: str, seconds: float) -> str:
    lines = [f"GPU numbers check on {device}: {sum(r.ok for r in rows)} of {len(rows)} rows pass in {seconds:.0f} s",
             "", "| part | row | status | measured |", "|---|---|---|---|"]
    lines += [f"| {r.part} | {r.name} | {'PASS' if r.ok else 'FAIL'} | {r.detail} |" for r in rows]
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run every part on the CPU (the test suite's mode)")
    parser.add_argument("--parts", default="sampler,families,graph,update,remedies",
                        help="comma-separated parts to run")
    parser.add_argument("--out", type=Path, default=None, help="write gpu-numbers.md and .json here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    torch.manual_seed(0)
    device = _device(args.cpu)
    name = "cpu" if device.type == "cpu" else f"cuda:0 ({torch.cuda.get_device_name(0)}, torch {torch.__version__})"
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as work:
        parts = {"sampler": lambda: sampler_rows(device), "families": lambda: family_rows(device),
                 "graph": lambda: graph_rows(device, args.cpu),
                 "update": lambda: update_rows(device), "remedies": lambda: remedy_rows(device, Path(work))}
        for part in args.parts.split(","):
            rows += _guarded(part, parts[part])
            print(markdown([r for r in rows if r.part == part], name, time.perf_counter() - started), flush=True)
    table = markdown(rows, name, time.perf_counter() - started)
    print(table)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu-numbers.md").write_text(table)
        (args.out / "gpu-numbers.json").write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
    return 0 if rows and all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
