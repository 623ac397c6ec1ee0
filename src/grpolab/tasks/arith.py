"""The embedded synthetic task ``arith``: procedurally generated arithmetic with an exact-match answer.

A problem is an expression such as ``12+7*3=`` (or, with ``word_problems=True``, ``what is 12 plus 7
times 3? ``) and its reference is the integer value under the usual precedence (``33``). The
completion is just the answer, checked by the ``exact`` verifier after whitespace normalisation.

How this departs from the papers: they train real models (Qwen, Llama, Nemotron) on GSM8K and
MATH-500. ``arith`` is a synthetic stand-in that runs on a CPU in minutes with the embedded model
(``grpolab/assets/embedded``). It keeps what matters for gradient starvation: a binary verifiable
reward and a starting policy whose per-prompt success is bimodal (easy problems are nearly always
solved, hard ones nearly never), so many groups of G completions are all right or all wrong.

Splits are disjoint by construction, for every seed and every choice of knobs: a stable hash of the
prompt text puts each possible prompt in exactly one bucket, ``test`` (20%), ``train`` (40%) or
``reserved`` (40%). The seed only chooses which prompts of a bucket are drawn. The reserved bucket
is never used by the task; ``scripts/make_embedded_model.py`` trains the embedded model on it, so
the model never saw an RL prompt or a test prompt during supervised training.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass

from grpolab.errors import UserError
from grpolab.tasks.base import Problem, Task

__all__ = ["ALPHABET", "OPERATOR_WORDS", "ArithSpec", "bucket_of", "evaluate", "make_task", "sample_problem"]

OPERATOR_WORDS = {"+": "plus", "-": "minus", "*": "times"}
# Every character an ``arith`` prompt or reference can contain (plain and word-problem phrasing).
ALPHABET = "".join(sorted(set("0123456789+-*=? " + "what is" + "".join(OPERATOR_WORDS.values()))))

_MAX_OPERANDS = 6
_MAX_DIGITS = 5
# Percent of the hash space per bucket, in order: [0, 20) test, [20, 60) train, [60, 100) reserved.
_BUCKETS = (("test", 20), ("train", 60), ("reserved", 100))
# How many draws per wanted problem before giving up (the knobs allow too few distinct prompts).
_MAX_DRAWS_PER_PROBLEM = 200


@dataclass(frozen=True)
class ArithSpec:
    """The difficulty knobs of ``arith`` (validated by ``ArithSpec.checked``).

    Attributes:
        operands: inclusive range (low, high) of the number of operands in an expression.
        digits: inclusive range (low, high) of the number of digits of each operand.
        operators: the operators drawn from, a subset of ``+-*``.
        word_problems: phrase problems as ``what is 3 plus 4? `` instead of ``3+4=``.
    """

    operands: tuple[int, int] = (2, 3)
    digits: tuple[int, int] = (1, 2)
    operators: str = "+-*"
    word_problems: bool = False

    @classmethod
    def checked(cls, operands: object, digits: object, operators: object, word_problems: object) -> ArithSpec:
        """Build a spec from user input, raising ``UserError`` with the fix when a knob is invalid."""
        operand_range = _checked_range("operands", operands, 2, _MAX_OPERANDS)
        digit_range = _checked_range("digits", digits, 1, _MAX_DIGITS)
        if not isinstance(operators, str) or not operators or set(operators) - set(OPERATOR_WORDS):
            raise UserError(f"arith: operators must be a non-empty string of '+', '-', '*'; got {operators!r}")
        unique_operators = "".join(sorted(set(operators), key="+-*".index))
        return cls(operand_range, digit_range, unique_operators, bool(word_problems))

    @property
    def max_answer_chars(self) -> int:
        """An upper bound on the length of a reference (sign plus digits of the largest product)."""
        return 1 + self.digits[1] * self.operands[1]


def _checked_range(name: str, value: object, low: int, high: int) -> tuple[int, int]:
    """``value`` as an inclusive (low, high) pair within [low, high]; an int n means (n, n)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise UserError(f"arith: {name} must be an int or a (low, high) pair of ints; got {value!r}")
    first, last = int(value[0]), int(value[1])
    if not low <= first <= last <= high:
        raise UserError(f"arith: {name} must satisfy {low} <= low <= high <= {high}; got ({first}, {last})")
    return first, last


def evaluate(numbers: list[int], operators: list[str]) -> int:
    """The value of ``numbers[0] op[0] numbers[1] ...`` with ``*`` binding tighter than ``+`` and ``-``."""
    terms = [numbers[0]]  # signed products, summed at the end
    for operator, number in zip(operators, numbers[1:], strict=True):
        if operator == "*":
            terms[-1] *= number
        else:
            terms.append(number if operator == "+" else -number)
    return sum(terms)


def bucket_of(prompt: str) -> str:
    """The split a prompt text belongs to for every seed: ``test``, ``train`` or ``reserved``."""
    percent = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big") % 100
    return next(name for name, end in _BUCKETS if percent < end)


def sample_problem(rng: random.Random, spec: ArithSpec) -> tuple[str, str]:
    """Draw one (prompt, reference) pair from ``spec``'s distribution."""
    count = rng.randint(*spec.operands)
    numbers = []
    for _ in range(count):
        num_digits = rng.randint(*spec.digits)
        numbers.append(rng.randint(0 if num_digits == 1 else 10 ** (num_digits - 1), 10**num_digits - 1))
    operators = [rng.choice(spec.operators) for _ in range(count - 1)]
    reference = str(evaluate(numbers, operators))
    if spec.word_problems:
        words = [str(numbers[0])]
        for operator, number in zip(operators, numbers[1:], strict=True):
            words += [OPERATOR_WORDS[operator], str(number)]
        return f"what is {' '.join(words)}? ", reference
    expression = str(numbers[0]) + "".join(f"{op}{n}" for op, n in zip(operators, numbers[1:], strict=True))
    return f"{expression}=", reference


def draw_unique(rng: random.Random, spec: ArithSpec, bucket: str) -> Iterator[tuple[str, str]]:
    """Distinct (prompt, reference) pairs of ``bucket``, in draw order; raises if they run out."""
    seen: set[str] = set()
    misses = 0
    while misses < _MAX_DRAWS_PER_PROBLEM:
        prompt, reference = sample_problem(rng, spec)
        if prompt in seen or bucket_of(prompt) != bucket:
            misses += 1
            continue
        misses = 0
        seen.add(prompt)
        yield prompt, reference
    raise UserError(
        f"arith: the knobs allow too few distinct {bucket} prompts (found {len(seen)}); "
        "lower num_train/num_test or widen operands/digits/operators"
    )


def possible_prompts(spec: ArithSpec) -> int:
    """How many distinct prompts ``spec`` makes (a prompt's text names its operands and operators)."""
    numbers = sum(10 if d == 1 else 9 * 10 ** (d - 1) for d in range(spec.digits[0], spec.digits[1] + 1))
    return sum(numbers**k * len(spec.operators) ** (k - 1) for k in range(spec.operands[0], spec.operands[1] + 1))


def _check_size(spec: ArithSpec, split: str, size: int) -> None:
    """Refuse before drawing a split larger than its bucket's share of the possible prompts (drawing toward it
    took minutes with no output for num_test 2,000,000)."""
    start = 0
    for name, end in _BUCKETS:
        if name == split:
            available = possible_prompts(spec) * (end - start) // 100
            if size > available:
                raise UserError(f"arith: the knobs allow too few distinct {split} prompts: num_{split} {size:,} "
                                f"asked, about {available:,} exist; lower num_{split} or widen "
                                "operands/digits/operators")
            return
        start = end


def _split(seed: int, spec: ArithSpec, split: str, size: int) -> tuple[Problem, ...]:
    """``size`` problems of ``split`` drawn with a random stream keyed by (seed, split)."""
    _check_size(spec, split, size)
    rng = random.Random(f"arith:{seed}:{split}")  # str seeds are hashed with SHA-512: stable everywhere
    pairs = draw_unique(rng, spec, split)
    return tuple(
        Problem(id=f"arith-{split}-{index:05d}", prompt=prompt, reference=reference)
        for index, (prompt, reference) in zip(range(size), pairs, strict=False)
    )


def make_task(
    *,
    seed: int = 0,
    num_train: int = 500,
    num_test: int = 200,
    operands: tuple[int, int] | int = (2, 3),
    digits: tuple[int, int] | int = (1, 2),
    operators: str = "+-*",
    word_problems: bool = False,
    **_: object,
) -> Task:
    """The ``arith`` task: ``num_train`` RL prompts and ``num_test`` held-out prompts for ``seed``.

    ``operands`` and ``digits`` are inclusive (low, high) ranges (or one int); ``operators`` is a
    subset of ``+-*``. The defaults define the prompts of the default experiment.
    """
    spec = ArithSpec.checked(operands, digits, operators, word_problems)
    for name, size in (("num_train", num_train), ("num_test", num_test)):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise UserError(f"arith: {name} must be a positive int; got {size!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UserError(f"arith: seed must be an int; got {seed!r}")
    return Task(
        name="arith",
        train=_split(seed, spec, "train", num_train),
        test=_split(seed, spec, "test", num_test),
        verifier="exact",
        max_new_tokens=spec.max_answer_chars + 1,  # the answer, then EOS
        use_chat_template=False,
    )
