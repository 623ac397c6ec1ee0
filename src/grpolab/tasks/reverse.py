"""The embedded default task ``reverse``: write a digit string backwards.

A prompt is a digit string of 3 to 6 digits, a marker ``+`` or ``*``, then ``=`` (``4821*=``); the
reference is the string reversed (``1284``), checked by the ``exact`` verifier. The prompt family is the
marker and the length (``*len4``): 8 families.

Why this task (the embedded model's design, see ``scripts/make_embedded_model.py`` and
docs/embedded-model.md): RL on a binary reward mostly *compresses search*: it makes the policy pick, more
often, a procedure it can already carry out. The embedded model was trained to carry out two procedures
on any digit string, *reverse* and *copy*, and to choose between them with a probability that depends on
the family: mostly reverse after ``+``, mostly copy after ``*``. So its held-out errors are choices, not
missing skills, every family generalises to unseen strings, and per-prompt success is bimodal: ``+``
prompts are nearly always solved, ``*`` prompts nearly never. That is the regime where group-centred
advantages starve (most ``*`` groups are all wrong) and where a fixed-reference advantage still pushes.

Departures from the papers: they train pretrained LLMs on GSM8K and MATH-500; this is a synthetic
stand-in that runs in minutes on a CPU and shows the same starvation signature.

Splits: a stable hash of the prompt text puts every possible prompt in exactly one bucket for every seed:
``test`` (10%), ``validation`` (10%), ``train`` (40%) or ``sft`` (40%). The test and validation splits
are fixed samples of their buckets; training prompts are drawn fresh every step from the train bucket by
a stream keyed by (seed, step, round), so there is no pool small enough to memorise. The ``sft`` bucket
is where the embedded model's supervised data came from; it is never used by the task. Palindromes are
left out everywhere (reversing and copying them give the same answer).

A fixed train pool (``train_pool=N``, ``pool_seed``): the train split is instead a fixed sample of N prompts of
the train bucket, drawn like the test and validation samples (from ``pool_seed``), and the task has no train
stream: steps draw from the pool, so prompts recur, which a curriculum by recent success
(``grpolab.train.curriculum``) needs. The default (no pool) is the stream above, unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import random

from grpolab.errors import UserError
from grpolab.tasks.base import Problem, Task

__all__ = ["MARKERS", "bucket_of", "bucket_size", "family_of", "make_task", "sample_string"]

MARKERS = "+*"
# Percent of the hash space per bucket, in order.
_BUCKETS = (("test", 10), ("validation", 20), ("train", 60), ("sft", 100))
_MAX_DRAWS = 10_000
# Up to this many possible prompts, a bucket's size is counted exactly; past it, it is the bucket's share.
_COUNTED = 200_000


def bucket_of(prompt: str) -> str:
    """The bucket a prompt belongs to for every seed: ``test``, ``validation``, ``train`` or ``sft``."""
    percent = int.from_bytes(hashlib.sha256(f"reverse:{prompt}".encode()).digest()[:8], "big") % 100
    return next(name for name, end in _BUCKETS if percent < end)


def family_of(digits: str, marker: str) -> str:
    """The family label of a prompt, e.g. ``*len4``."""
    return f"{marker}len{len(digits)}"


def sample_string(rng: random.Random, lengths: tuple[int, int], markers: str) -> tuple[str, str]:
    """One (digits, marker) pair: uniform length, uniform digits, uniform marker; never a palindrome."""
    while True:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(*lengths)))
        if digits != digits[::-1]:
            return digits, rng.choice(markers)


def _problem(digits: str, marker: str, problem_id: str) -> Problem:
    return Problem(id=problem_id, prompt=f"{digits}{marker}=", reference=digits[::-1],
                   family=family_of(digits, marker))


def _possible(lengths: tuple[int, int], markers: str) -> int:
    """How many distinct prompts ``lengths`` and ``markers`` make: non-palindromic digit strings times markers."""
    return len(markers) * sum(10**n - 10 ** ((n + 1) // 2) for n in range(lengths[0], lengths[1] + 1))


@functools.lru_cache(maxsize=64)
def bucket_size(bucket: str, lengths: tuple[int, int], markers: str) -> int:
    """How many distinct prompts of ``bucket`` ``lengths`` and ``markers`` make: counted when there are at most
    ``_COUNTED`` prompts in all, else the bucket's share of them (within a fraction of a percent)."""
    possible = _possible(lengths, markers)
    if possible > _COUNTED:
        start = 0
        for name, end in _BUCKETS:
            if name == bucket:
                return possible * (end - start) // 100
            start = end
    return sum(1 for n in range(lengths[0], lengths[1] + 1) for value in range(10**n)
               if (digits := f"{value:0{n}d}") != digits[::-1]
               for marker in markers if bucket_of(f"{digits}{marker}=") == bucket)


def draw(rng: random.Random, bucket: str, count: int, lengths: tuple[int, int], markers: str,
         prefix: str) -> list[Problem]:
    """``count`` problems of ``bucket`` (distinct prompts), in draw order. A request past the bucket's size is
    refused before drawing (it took up to 10,000 draws per problem, 300 s and more for num_test 2,000,000)."""
    available = bucket_size(bucket, lengths, markers)
    if count > available:
        raise UserError(f"reverse: too few distinct {bucket} prompts: {count:,} asked, and lengths {lengths} with "
                        f"markers {markers!r} make about {available:,}; lower the split sizes or widen lengths")
    problems: list[Problem] = []
    seen: set[str] = set()
    for _ in range(_MAX_DRAWS * max(count, 1)):
        if len(problems) == count:
            return problems
        digits, marker = sample_string(rng, lengths, markers)
        prompt = f"{digits}{marker}="
        if prompt not in seen and bucket_of(prompt) == bucket:
            seen.add(prompt)
            problems.append(_problem(digits, marker, f"{prefix}-{len(problems):05d}"))
    raise UserError(f"reverse: too few distinct {bucket} prompts for lengths {lengths}; lower the split sizes")


class _TrainStream:
    """Fresh train-bucket problems for (seed, step, round): the ``Task.train_stream`` of ``reverse``."""

    def __init__(self, lengths: tuple[int, int], markers: str):
        self.lengths, self.markers = lengths, markers

    def __call__(self, seed: int, step: int, round_: int, count: int) -> list[Problem]:
        rng = random.Random(f"reverse-train:{seed}:{step}:{round_}")
        return draw(rng, "train", count, self.lengths, self.markers, f"reverse-train-s{step}r{round_}")


def _checked_lengths(lengths: object) -> tuple[int, int]:
    if isinstance(lengths, int) and not isinstance(lengths, bool):
        lengths = (lengths, lengths)
    if (not isinstance(lengths, (list, tuple)) or len(lengths) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in lengths)
            or not 2 <= lengths[0] <= lengths[1] <= 12):
        raise UserError(f"reverse: lengths must be an int or a (low, high) pair with 2 <= low <= high <= 12; "
                        f"got {lengths!r}")
    return int(lengths[0]), int(lengths[1])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _train_pool(size: object, pool_seed: object, bounds: tuple[int, int], markers: str) -> tuple[Problem, ...]:
    """The fixed train split: ``size`` distinct train-bucket prompts drawn from ``pool_seed``."""
    if not _is_int(size) or size < 1:
        raise UserError(f"reverse: train_pool must be a positive int (the number of fixed train prompts) or null "
                        f"(fresh prompts every step); got {size!r}")
    if not _is_int(pool_seed):
        raise UserError(f"reverse: pool_seed must be an int; got {pool_seed!r}")
    available = bucket_size("train", bounds, markers)
    if size > available:
        raise UserError(f"reverse: train_pool {size:,} is more than the about {available:,} train prompts that "
                        f"lengths {bounds} with markers {markers!r} make; lower train_pool or widen lengths")
    return tuple(draw(random.Random(f"reverse-train-pool:{pool_seed}"), "train", size, bounds, markers,
                      f"reverse-pool{pool_seed}"))


def make_task(*, num_test: int = 200, num_validation: int = 200, lengths: object = (3, 6),
              markers: str = MARKERS, train_pool: int | None = None, pool_seed: int | None = None,
              **_: object) -> Task:
    """The ``reverse`` task. Test and validation splits are the same for every run (so runs with different
    seeds are evaluated on the same prompts); the run's seed keys only the training stream. With ``train_pool``
    N, the train split is a fixed sample of N train-bucket prompts drawn from ``pool_seed`` (0 when not given;
    the run's seed does not change it) and there is no stream."""
    bounds = _checked_lengths(lengths)
    if not isinstance(markers, str) or not markers or set(markers) - set(MARKERS):
        raise UserError(f"reverse: markers must be a non-empty string of '+' and '*'; got {markers!r}")
    for name, size in (("num_test", num_test), ("num_validation", num_validation)):
        if not _is_int(size) or size < 1:
            raise UserError(f"reverse: {name} must be a positive int; got {size!r}")
    if train_pool is None and pool_seed is not None:
        raise UserError("reverse: pool_seed keys the fixed train pool, and there is none; give train_pool too, "
                        "or drop pool_seed")
    if train_pool is None:
        stream = _TrainStream(bounds, markers)
        train, train_stream = tuple(stream(0, 0, 0, 64)), stream  # a preview of the stream; training draws fresh
    else:
        train, train_stream = _train_pool(train_pool, 0 if pool_seed is None else pool_seed, bounds, markers), None
    return Task(
        name="reverse",
        train=train,
        test=tuple(draw(random.Random("reverse-test"), "test", num_test, bounds, markers, "reverse-test")),
        validation=tuple(draw(random.Random("reverse-validation"), "validation", num_validation, bounds, markers,
                              "reverse-validation")),
        verifier="exact",
        max_new_tokens=bounds[1] + 1,  # the answer, then EOS
        use_chat_template=False,
        train_stream=train_stream,
    )
