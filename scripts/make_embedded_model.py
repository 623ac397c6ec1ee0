"""Build the embedded default model: a character-level tokenizer and a tiny Llama trained on arithmetic.

    python scripts/make_embedded_model.py --seed 0 --out src/grpolab/assets/embedded

Supervised fine-tuning from scratch on ``arith`` problems of the ``reserved`` hash bucket (see
``grpolab.tasks.arith``), so no RL train prompt or test prompt is ever seen. Training stops early on
purpose: the model should be *partially* competent, solving easy problems almost always and hard ones
almost never, which is the bimodal starting point that makes gradient starvation visible. The script
ends by measuring that starting competence on the default task (temperature 1.0, G samples per
prompt) and writes the numbers to ``competence.json`` next to the weights.

Departure from the papers: they start RL from pretrained instruct models (Qwen, Llama) on GSM8K. This
is a synthetic stand-in that trains in minutes on a CPU and has the same starvation signature.
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

from grpolab.tasks.arith import ALPHABET, ArithSpec, bucket_of, make_task, sample_problem
from grpolab.tasks.base import Problem

SPECIAL_TOKENS = {"pad": "<pad>", "bos": "<bos>", "eos": "<eos>", "unk": "<unk>"}
# The SFT data mix: (difficulty, weight). Two-operand problems are over-weighted so that the model
# masters most of them while three-operand problems stay mostly out of reach (the bimodal start).
# No word problems: they would double the sequence length (and the training time) of the default.
SFT_MIX = (
    (ArithSpec(operands=(2, 2)), 0.6),
    (ArithSpec(), 0.4),
)


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


def off_by_one_rate(prompt: str, noise: tuple[float, float, float]) -> float:
    """The share of SFT labels replaced by ``answer + 1`` for this prompt: by its hardest operator
    (``*``, then ``-``, then ``+``), so the bias is a visible, learnable feature of the prompt."""
    if "*" in prompt:
        return noise[2]
    return noise[1] if "-" in prompt else noise[0]


def sft_examples(seed: int, count: int, noise: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> list[tuple[str, str]]:
    """``count`` (prompt, reference) pairs of the default difficulty, all from the reserved bucket; a share
    ``off_by_one_rate`` of the labels is the systematic wrong answer ``reference + 1``."""
    rng = random.Random(f"embedded-sft:{seed}")
    examples: list[tuple[str, str]] = []
    while len(examples) < count:
        spec = rng.choices([spec for spec, _ in SFT_MIX], weights=[weight for _, weight in SFT_MIX])[0]
        prompt, reference = sample_problem(rng, spec)
        if bucket_of(prompt) == "reserved":
            if rng.random() < off_by_one_rate(prompt, noise):
                reference = str(int(reference) + 1)
            examples.append((prompt, reference))
    return examples


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
    examples = sft_examples(args.seed, args.steps * args.batch_size, tuple(args.off_by_one))
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


def competence(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, seed: int, group: int) -> dict:
    """Starting competence on the default ``arith`` task: G-sample histogram, degeneracy, greedy accuracy."""
    task = make_task(seed=0)
    torch.manual_seed(seed)
    counts = success_counts(model, tokenizer, task.train, samples=group, max_new_tokens=task.max_new_tokens)
    test_counts = success_counts(model, tokenizer, task.test, samples=group, max_new_tokens=task.max_new_tokens)
    greedy = success_counts(model, tokenizer, task.test, samples=1, max_new_tokens=task.max_new_tokens, greedy=True)
    mean = sum(counts) / (group * len(counts))
    return {
        "group_size": group,
        "train_histogram": [counts.count(k) for k in range(group + 1)],
        "train_mean_success": round(mean, 4),
        "degenerate_rate_real": round(sum(c in (0, group) for c in counts) / len(counts), 4),
        "degenerate_rate_iid": round(mean**group + (1 - mean) ** group, 4),
        "test_mean_success": round(sum(test_counts) / (group * len(test_counts)), 4),
        "test_greedy_accuracy": round(sum(greedy) / len(greedy), 4),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seeds the SFT data, the init and the sampling")
    parser.add_argument("--out", type=Path, default=Path("src/grpolab/assets/embedded"))
    parser.add_argument("--steps", type=int, default=4000, help="SFT optimiser steps (the stopping point)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 is fastest on 2 cores)")
    parser.add_argument("--group", type=int, default=4, help="G for the competence measurement")
    parser.add_argument("--off-by-one", type=float, nargs=3, default=(0.0, 0.0, 0.0), metavar=("ADD", "SUB", "MUL"),
                        help="share of SFT labels replaced by answer+1 for prompts whose hardest operator is +, -, *")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
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
    report = competence(model, tokenizer, args.seed, args.group)
    report["sft_args"] = {key: str(value) for key, value in vars(args).items()}
    report["sft_seconds"] = round(sft_seconds, 1)
    (args.out / "competence.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
