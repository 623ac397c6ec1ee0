"""GRPO with TRL and a grpolab advantage estimator: the sign advantage by default (no gradient starvation).

Multi-GPU with vLLM generation (documented; see docs/integrations.md)::

    accelerate launch --config_file examples/trl/accelerate_multi_gpu.yaml examples/trl/train_grpo.py \\
        --model Qwen/Qwen2.5-0.5B-Instruct --advantage sign --use-vllm --vllm-mode colocate \\
        --num-generations 8 --max-completion-length 256 --max-steps 200 --bf16

CPU smoke run (what the tests run; builds a tiny random model, downloads nothing)::

    python examples/trl/train_grpo.py --tiny-model tiny-model --cpu --max-steps 2 --output-dir trl-out

The task is synthetic two-number addition with a binary reward (1 if the first integer in the
completion is the sum), so the script needs no data set download either.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

TINY_ALPHABET = list("0123456789+-=?:. abcdefghijklmnopqrstuvwxyzW\n")


def build_tiny_model(out_dir: str | Path, *, hidden: int = 16, layers: int = 1, seed: int = 0) -> Path:
    """Save a tiny random LlamaForCausalLM and a character-level tokenizer to ``out_dir``; return it."""
    import torch
    from tokenizers import Tokenizer, decoders, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + TINY_ALPHABET)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def addition_dataset(size: int, seed: int):
    """``size`` prompts "What is a+b? Answer:" with the sum in the ``answer`` column."""
    from datasets import Dataset

    rng = random.Random(seed)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(size)]
    return Dataset.from_dict(
        {"prompt": [f"What is {a}+{b}? Answer:" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]}
    )


def addition_reward(completions: list[str], answer: list[str], **_: object) -> list[float]:
    """1.0 if the first integer in the completion equals the answer, else 0.0."""
    rewards = []
    for completion, expected in zip(completions, answer, strict=True):
        match = re.search(r"-?\d+", completion)
        rewards.append(float(match is not None and match.group() == expected))
    return rewards


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct", help="model id or local path")
    p.add_argument("--tiny-model", metavar="DIR", help="build a tiny random model in DIR and train it")
    p.add_argument("--advantage", default="sign", help="a grpolab estimator (grpolab estimators)")
    p.add_argument("--advantage-kwargs", default="{}", help="JSON hyper-parameters, e.g. '{\"k\": 4}'")
    p.add_argument("--output-dir", default="runs/trl-grpo")
    p.add_argument("--num-prompts", type=int, default=1024)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--per-device-batch-size", type=int, default=8, help="completions per device and step")
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--learning-rate", type=float, default=1e-6)
    p.add_argument("--use-vllm", action="store_true", help="generate with vLLM (GPU only)")
    p.add_argument("--vllm-mode", default="colocate", choices=["colocate", "server"])
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (gloo backend when distributed)")
    p.add_argument("--log-completions", action="store_true", help="write completions/*.parquet (auditable)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def build_config(args: argparse.Namespace):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=args.per_device_batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        use_vllm=args.use_vllm,
        vllm_mode=args.vllm_mode,
        bf16=args.bf16,
        use_cpu=args.cpu,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        log_completions=args.log_completions,
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from grpolab.integrations.trl import GRPOTrainer

    model = args.model
    if args.tiny_model:  # single process only: concurrent ranks would race on the directory
        model = str(build_tiny_model(args.tiny_model))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=addition_reward,
        args=build_config(args),
        train_dataset=addition_dataset(args.num_prompts, args.seed),
        advantage=args.advantage,
        advantage_kwargs=json.loads(args.advantage_kwargs),
    )
    trainer.train()
    if trainer.accelerator.is_main_process:
        logged = [e for e in trainer.state.log_history if "starvation/degenerate" in e]
        last = {k: v for k, v in (logged[-1] if logged else {}).items() if k.startswith("starvation/")}
        print(json.dumps({"advantage": args.advantage, **last}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
