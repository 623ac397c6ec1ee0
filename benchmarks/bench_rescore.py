"""Re-scoring a harness's samples (``grpolab eval --from-samples``): 100,000 GSM8K responses in an lm-eval samples
file, read, scored with the ``gsm8k`` verifier and summarised (avg@n, pass@k, maj@k, pass^k for every k <= n with
standard errors): goal < 30 s on 2 cores.

The file is written here in lm-eval 0.4.x's layout (``tests/fixtures/lm_eval/make_samples.py``): 1,250 documents
(the 50 GSM8K test problems of ``tests/fixtures/gsm8k`` over again, each a document of its own) x ``repeats: 80``,
two filter lines per document as lm-eval's ``gsm8k`` task writes. Each response is a worked solution of about
400 characters, distinct from every other (so no pair is scored twice), right with the document's own chance
(drawn uniformly), else one of three wrong numbers or, 1 time in 20, no number at all. ``--quick``: 10,000.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import Row, bench_main, row

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gsm8k" / "test.jsonl"
REPEATS = 80
GOAL_S = 30.0


def _response(rng: random.Random, solution: str, answer: int, right: float, index: int) -> str:
    steps = solution.rpartition("####")[0].strip()
    roll = rng.random()
    if roll < right:
        final = f"#### {answer}"
    elif roll < right + (1 - right) * 0.95:
        final = f"#### {answer + rng.choice((-10, 1, 2))}"
    else:
        final = "I am not sure how to finish this one."
    return f" Let me think step by step (attempt {index}).\n{steps}\nSo the result follows.\n{final}"


def write_samples(directory: Path, documents: int, seed: int = 0) -> Path:
    """An lm-eval samples file of ``documents`` x ``REPEATS`` GSM8K responses; returns its path."""
    rng = random.Random(seed)
    problems = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    path = directory / "samples_gsm8k_2026-11-27T10-00-00.000000.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for doc_id in range(documents):
            doc = problems[doc_id % len(problems)]
            answer = int(doc["answer"].rpartition("####")[2].replace(",", ""))
            right = rng.random()
            resps = [_response(rng, doc["answer"], answer, right, i) for i in range(REPEATS)]
            for name in ("strict-match", "flexible-extract"):
                line = {"doc_id": doc_id, "doc": doc, "target": doc["answer"],
                        "arguments": {"gen_args_0": {"arg_0": f"Question: {doc['question']}\nAnswer:",
                                                     "arg_1": {"until": ["Question:"], "do_sample": True}}},
                        "resps": [resps], "filtered_resps": [str(answer)], "filter": name,
                        "metrics": ["exact_match"], "exact_match": 0.0}
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def _timed(fn, *args):
    started = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - started


def run(quick: bool) -> list[Row]:
    from grpolab.diagnostics.sampled import sampled_metrics
    from grpolab.harness_samples import read_samples, rescore

    documents = 125 if quick else 1250
    with tempfile.TemporaryDirectory() as tmp:
        path = write_samples(Path(tmp), documents)
        samples, read_s = _timed(read_samples, path)
        score, total_s = _timed(rescore, samples)
    _, metrics_s = _timed(sampled_metrics, score.n, score.correct, score.votes)
    responses = samples.response_count
    seconds = read_s + total_s
    return [row(f"rescore_gsm8k_{responses // 1000}k_responses", value=seconds, unit="s",
                goal=f"< {GOAL_S:.0f}" if not quick else "info", met=seconds < GOAL_S if not quick else None,
                detail=f"{samples.prompts} documents x n = {REPEATS} ({samples.records} lines): read {read_s:.1f} s, "
                       f"score + metrics {total_s:.1f} s (of which metrics {metrics_s:.1f} s); "
                       f"avg@n {score.metrics.values['avg@n'].mean:.3f}, maj@{REPEATS} "
                       f"{score.metrics.values[f'maj@{REPEATS}'].mean:.3f}"),
            row("rescore_gsm8k_responses_per_s", value=responses / seconds, unit="responses/s", goal="info",
                met=None, detail="read, score and summarise, one process")]


if __name__ == "__main__":
    sys.exit(bench_main(run))
