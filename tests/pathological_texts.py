"""Pathological texts for the verifiers, shared by ``tests/verifiers/test_verifiers.py`` (the scores) and
``benchmarks/bench_verifiers.py`` (how long the worst of them takes)."""

PATHOLOGICAL = {
    "1MB text": "lorem ipsum 12 " * 70_000,
    "1MB digits": "7" * 1_000_000,
    "1MB hashes": "#### " * 200_000,
    "10k nested boxed": "\\boxed{" * 10_000 + "1" + "}" * 10_000,
    "10k nested boxed at end": "x " * 10 + "\\boxed{" * 10_000,
    "10k nested braces in box": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_001,
    "power tower": "\\boxed{10^{10^{10}}}",
    "power tower plain": "The answer is 10^{10^{10}}\n#### 10^10^10",
    "factorial": "\\boxed{(10^{9})!}",
    "huge number": "#### " + "9" * 5_000 + "\n\\boxed{" + "9" * 900 + "}",
    "huge decimal": "#### 0." + "0" * 8_000 + "1",
    "many commas": "1" + ",000" * 2_000,
    "arabic-indic digits": "#### ١٢٣٤ \\boxed{١٢٣٤}",
    "fullwidth digits": "#### １２３４ \\boxed{１２３４}",
    "control characters": "\x00\x01\x1b[31m#### 5\x07\r\n\\boxed{\x00}",
    "surrogate-ish": "\ud800 \\boxed{\udfff}",
    "unbalanced": "\\boxed{" + "\\frac{" * 500,
    "regex bait": "answer is " + " " * 100_000 + "x",
    "deep latex": "\\boxed{" + "\\sqrt{" * 60 + "2" + "}" * 61,
    "long box content": "\\boxed{" + "x+" * 5_000 + "1}",
    "matrix": "\\boxed{\\begin{pmatrix}" + "1&" * 300 + "1\\end{pmatrix}}",
}
