"""Peak host memory of the update's target log-probs and of the entropy bonus's entropy: the plain float32
log-softmax against ``target_logprobs`` and against ``entropy``.

    python benchmarks/bench_logprob_memory.py [--rows 2048] [--vocab 49152] [--dtype bfloat16]

Each variant runs in a fresh process: bfloat16 logits [M, V] (as the lm_head gives them under autocast) with
autograd, the log-prob of one target per row (or the entropy of each row), a backward. It prints the peak resident
memory above the state before the logits were made (``ru_maxrss``), in MiB and in units of one [M, V] float32
tensor.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_WORKLOAD = r'''
import resource, sys, torch
rows, vocab, dtype, variant = int(sys.argv[1]), int(sys.argv[2]), getattr(torch, sys.argv[3]), sys.argv[4]
from grpolab.engine.target_logprobs import entropy, target_logprobs
torch.manual_seed(0)
weight = torch.randn(vocab, 64).to(dtype).requires_grad_(True)  # a stand-in lm_head: the logits' producer
hidden = torch.randn(rows, 64).to(dtype)
targets = torch.randint(0, vocab, (rows,))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
logits = hidden @ weight.T  # [M, V]
if variant == "plain":
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, None]).squeeze(1)
elif variant == "target_logprobs":
    picked = target_logprobs(logits, targets)
elif variant == "plain entropy":
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    picked = -(log_probs.exp() * log_probs).sum(dim=-1)
else:
    picked = entropy(logits)
picked.sum().backward()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    unit = args.rows * args.vocab * 4 / 2**20
    print(f"| variant | peak above start (MiB) | in [M, V] float32 units (M={args.rows}, V={args.vocab}, "
          f"{args.dtype} logits) |\n|---|---|---|")
    for variant in ("plain", "target_logprobs", "plain entropy", "entropy"):
        out = subprocess.run([sys.executable, "-c", _WORKLOAD, str(args.rows), str(args.vocab), args.dtype, variant],
                             capture_output=True, text=True, check=True)
        peak = float(out.stdout.split()[-1])
        print(f"| {variant} | {peak:,.0f} | {peak / unit:.2f} |")


if __name__ == "__main__":
    main()
