"""Vote keys (``grpolab.verifiers.votes``): every built-in verifier has one, and a completion's key is the answer
its verifier reads from it (scored against that key as the reference, the completion is right)."""

from __future__ import annotations

import pytest

from grpolab import verifiers
from grpolab.verifiers.votes import VOTE_KEYS, vote_key_fn
from gsm8k_cases import GSM8K_CASES

pytestmark = pytest.mark.fast


def test_every_built_in_verifier_has_a_vote_key() -> None:
    built_in = {name for name in verifiers.available()
                if verifiers.get_verifier(name).__module__.startswith("grpolab.verifiers")}  # not tests' own
    assert built_in and set(VOTE_KEYS) == built_in
    assert vote_key_fn("package.module:function") is None


@pytest.mark.parametrize("verifier", ["gsm8k", "gsm8k_strict"])
@pytest.mark.parametrize("case", GSM8K_CASES, ids=[repr(c[0])[:40] for c in GSM8K_CASES])
def test_a_gsm8k_key_is_the_number_the_verifier_reads(verifier: str, case: tuple) -> None:
    completion = case[0]
    key = vote_key_fn(verifier)(completion)
    if key is None:  # no answer: the verifier scores it wrong against any number
        assert verifiers.score(verifier, completion, "123456789") == 0.0
    else:
        assert verifiers.score(verifier, completion, str(key)) == 1.0


def test_gsm8k_keys_vote_together_when_the_numbers_are_equal() -> None:
    key = vote_key_fn("gsm8k")
    assert key("#### 20") == key("The answer is 20.0") == key("\\boxed{20}") != key("#### 21")
    assert key("no numbers here") is None


def test_math_keys_use_the_verifiers_normalisation() -> None:
    key = vote_key_fn("math")
    assert key("so \\boxed{\\dfrac{1}{2}}") == key("\\boxed{ \\frac{1}{2} }.") != key("\\boxed{0.5}")
    assert key("no box") is None and key("\\boxed{}") is None
    assert vote_key_fn("exact")("  4 2 ") == "4 2" and vote_key_fn("exact")("   ") is None
