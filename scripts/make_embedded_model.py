"""Build an embedded model: a character-level tokenizer and a tiny Llama trained from scratch.

    python scripts/make_embedded_model.py --task reverse --out runs/embedded-model   # the default model
    python scripts/make_embedded_model.py --task arith --steps 4000 --out runs/embedded-arith

The shipped weights are ``src/grpolab/assets/embedded`` (``--task reverse``, the default) and
``src/grpolab/assets/embedded-arith`` (``--task arith``). The script never writes into an existing
model directory unless ``--force`` is given, so it cannot overwrite the shipped model by accident; it is
deterministic (one thread, deterministic algorithms, every random draw keyed by ``--seed``), and the
commands above reproduce the shipped weights bit for bit on the same machine kind.

``reverse`` (see ``grpolab.tasks.reverse``): supervised data from the task's ``sft`` hash bucket only, so
no RL, validation or test prompt is ever seen. Each label is the reversed string with a probability that
depends on the prompt family (``REVERSE_RATE``: high after ``+``, low after ``*``, falling with length)
and the copied string otherwise. The model thus learns two procedures that work on any string and a
family-dependent choice between them: the starting point where RL compresses search, and where
per-prompt success is bimodal (the gradient-starvation regime).

``arith`` (see ``grpolab.tasks.arith``): supervised data from the ``reserved`` bucket, stopped early so
that easy problems are mostly solved and hard ones mostly not.

The script ends by measuring the starting competence on the task (temperature 1.0, G samples per prompt)
and writes it to ``competence.json`` next to the weights.

Departure from the papers: they start RL from pretrained instruct models (Qwen, Llama) on GSM8K. These
are synthetic stand-ins that train in minutes on a CPU and have the same starvation signature.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from grpolab.tasks import get_task, reverse
from grpolab.tasks.arith import ALPHABET, ArithSpec, bucket_of, sample_problem
from grpolab.tasks.base import Problem

SPECIAL_TOKENS = {"pad": "<pad>", "bos": "<bos>", "eos": "<eos>", "unk": "<unk>"}
# The SFT data mix: (difficulty, weight). Two-operand problems are over-weighted so that the model
# masters most of them while three-operand problems stay mostly out of reach (the bimodal start).
# No word problems: they would double the sequence length (and the training time) of the default.
SFT_MIX = (
    (ArithSpec(operands=(2, 2)), 0.6),
    (ArithSpec(), 0.4),
)
# reverse: the probability that an SFT label is the reversed (correct) string, by marker and length;
# the copied string otherwise. High after '+', low after '*': a bimodal start with two procedures.
REVERSE_RATE = {
    "+": {3: 0.95, 4: 0.90, 5: 0.80, 6: 0.70},
    "*": {3: 0.30, 4: 0.20, 5: 0.10, 6: 0.05},
}


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of ``arith`` plus <pad>, <bos>, <eos>, <unk>; prompts get a leading <bos>."""
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS.values())}
    vocab.update({char: len(SPECIAL_TOKENS) + index for index, char in enumerate(ALPHABET)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk"]))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    bos = SPECIAL_TOKENS["bos"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, vocab[bos])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=SPECIAL_TOKENS["eos"],
        pad_token=SPECIAL_TOKENS["pad"],
        unk_token=SPECIAL_TOKENS["unk"],
        padding_side="left",
        model_max_length=128,
    )


def build_model(tokenizer: PreTrainedTokenizerFast, args: argparse.Namespace) -> LlamaForCausalLM:
    """A freshly initialised tiny Llama (weights drawn from the current torch seed)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def arith_sft_examples(seed: int, count: int) -> list[tuple[str, str]]:
    """``count`` (prompt, reference) pairs of the default ``arith`` difficulty, all from the reserved bucket."""
    rng = random.Random(f"embedded-sft:{seed}")
    examples: list[tuple[str, str]] = []
    while len(examples) < count:
        spec = rng.choices([spec for spec, _ in SFT_MIX], weights=[weight for _, weight in SFT_MIX])[0]
        prompt, reference = sample_problem(rng, spec)
        if bucket_of(prompt) == "reserved":
            examples.append((prompt, reference))
    return examples


def reverse_sft_examples(seed: int, count: int) -> list[tuple[str, str]]:
    """``count`` (prompt, label) pairs of ``reverse`` from the sft bucket: the reversed string with
    probability ``REVERSE_RATE[marker][length]``, the copied string otherwise."""
    rng = random.Random(f"embedded-reverse-sft:{seed}")
    examples: list[tuple[str, str]] = []
    while len(examples) < count:
        digits, marker = reverse.sample_string(rng, (3, 6), reverse.MARKERS)
        prompt = f"{digits}{marker}="
        if reverse.bucket_of(prompt) == "sft":
            reversed_label = rng.random() < REVERSE_RATE[marker][len(digits)]
            examples.append((prompt, digits[::-1] if reversed_label else digits))
    return examples


SFT_EXAMPLES = {"arith": arith_sft_examples, "reverse": reverse_sft_examples}


def encode_sft_batch(
    tokenizer: PreTrainedTokenizerFast, pairs: list[tuple[str, str]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask, labels [B, T] for ``<bos> prompt answer <eos>``; loss on answer + eos."""
    rows, label_rows = [], []
    for prompt, reference in pairs:
        prompt_ids = tokenizer(prompt)["input_ids"]
        answer_ids = [*tokenizer(reference, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        rows.append(prompt_ids + answer_ids)
        label_rows.append([-100] * len(prompt_ids) + answer_ids)
    width = max(len(row) for row in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])  # left padding, as at sampling
    labels = torch.tensor([[-100] * (width - len(r)) + r for r in label_rows])
    starts = width - torch.tensor([len(r) for r in rows])
    attention_mask = torch.arange(width)[None, :] >= starts[:, None]
    return input_ids, attention_mask.long(), labels


def train(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, args: argparse.Namespace) -> None:
    """AdamW with linear warm-up and cosine decay over ``args.steps`` batches of fresh SFT examples."""
    examples = SFT_EXAMPLES[args.task](args.seed, args.steps * args.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, args.steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, args.steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    model.train()
    start = time.perf_counter()
    for step in range(args.steps):
        batch = examples[step * args.batch_size : (step + 1) * args.batch_size]
        input_ids, attention_mask, labels = encode_sft_batch(tokenizer, batch)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 200 == 0 or step == args.steps - 1:
            print(f"sft step {step:5d}  loss {loss.item():.4f}  {time.perf_counter() - start:6.1f}s", flush=True)
    model.eval()


@torch.no_grad()
def success_counts(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    problems: tuple[Problem, ...],
    *,
    samples: int,
    max_new_tokens: int,
    greedy: bool = False,
    chunk: int = 512,
) -> list[int]:
    """For each problem, how many of ``samples`` completions (temperature 1.0, or greedy) match exactly."""
    prompts = [p.prompt for p in problems for _ in range(samples)]
    references = [p.reference for p in problems for _ in range(samples)]
    hits: list[int] = []
    for begin in range(0, len(prompts), chunk):
        encoded = tokenizer(prompts[begin : begin + chunk], return_tensors="pt", padding=True)
        sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_p": 1.0}
        output = model.generate(**encoded, max_new_tokens=max_new_tokens, top_k=None, **sampling)
        texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        hits += [int(" ".join(t.split()) == r) for t, r in zip(texts, references[begin : begin + chunk], strict=True)]
    return [sum(hits[i * samples : (i + 1) * samples]) for i in range(len(problems))]


def _train_sample(task, count: int = 500) -> tuple[Problem, ...]:
    """The train problems to measure: the task's pool, or ``count`` problems of its stream."""
    if task.train_stream is None:
        return task.train
    return tuple(problem for step in range(1, count // 50 + 1) for problem in task.train_stream(0, step, 0, 50))


def competence(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, task_name: str, seed: int,
               group: int) -> dict:
    """Starting competence on the task's default prompts: G-sample histogram, degeneracy, greedy accuracy,
    and the mean success of each prompt family on the test split."""
    task = get_task(task_name)
    torch.manual_seed(seed)
    budget = task.max_new_tokens
    counts = success_counts(model, tokenizer, _train_sample(task), samples=group, max_new_tokens=budget)
    test_counts = success_counts(model, tokenizer, task.test, samples=group, max_new_tokens=budget)
    greedy = success_counts(model, tokenizer, task.test, samples=1, max_new_tokens=budget, greedy=True)
    mean = sum(counts) / (group * len(counts))
    report = {
        "group_size": group,
        "train_histogram": [counts.count(k) for k in range(group + 1)],
        "train_mean_success": round(mean, 4),
        "degenerate_rate_real": round(sum(c in (0, group) for c in counts) / len(counts), 4),
        "degenerate_rate_iid": round(mean**group + (1 - mean) ** group, 4),
        "test_mean_success": round(sum(test_counts) / (group * len(test_counts)), 4),
        "test_greedy_accuracy": round(sum(greedy) / len(greedy), 4),
    }
    families = sorted({p.family for p in task.test if p.family})
    if families:
        report["test_family_success"] = {
            family: round(sum(c for p, c in zip(task.test, test_counts, strict=True) if p.family == family)
                          / (group * sum(p.family == family for p in task.test)), 4)
            for family in families
        }
    return report


DEFAULT_STEPS = {"reverse": 1500, "arith": 4000}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(SFT_EXAMPLES), default="reverse", help="the task to train on")
    parser.add_argument("--seed", type=int, default=0, help="seeds the SFT data, the init and the sampling")
    parser.add_argument("--out", type=Path, default=Path("runs/embedded-model"),
                        help="output directory (default: runs/embedded-model; never the shipped model)")
    parser.add_argument("--force", action="store_true", help="write into --out even if it holds a model")
    parser.add_argument("--steps", type=int, default=None,
                        help="SFT optimiser steps (default: 1500 for reverse, 4000 for arith)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on 2 cores)")
    parser.add_argument("--group", type=int, default=4, help="G for the competence measurement")
    parser.add_argument("--skip-competence", action="store_true", help="write the weights only (for tests)")
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = DEFAULT_STEPS[args.task]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if (args.out / "model.safetensors").exists() and not args.force:
        raise SystemExit(f"{args.out} already holds a model; choose another --out or pass --force to replace it")
    torch.set_num_threads(args.threads)  # a fixed thread count keeps float reductions reproducible
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, args)
    print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    start = time.perf_counter()
    train(model, tokenizer, args)
    sft_seconds = time.perf_counter() - start
    print(f"sft time: {sft_seconds:.1f}s")
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=8,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    if args.skip_competence:
        return
    report = competence(model, tokenizer, args.task, args.seed, args.group)
    report["sft_args"] = {key: str(value) for key, value in vars(args).items() if key not in ("out", "force")}
    report["sft_seconds"] = round(sft_seconds, 1)
    (args.out / "competence.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
