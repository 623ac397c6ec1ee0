"""The ``grpolab`` lm-eval backend (``grpolab.integrations.lm_eval.backend``) on the embedded model, called as
lm-eval calls it: each request repeated ``repeats`` times in a row."""

from __future__ import annotations

import pytest
from lm_eval.api.instance import Instance

from grpolab.engine.rollout import encode_prompts, sample
from grpolab.errors import UserError
from grpolab.integrations.lm_eval.backend import GrpolabLM, cut_at_stop, register

SAMPLED = {"until": [], "do_sample": True, "temperature": 1.0, "max_gen_toks": 7}
GREEDY = {"until": [], "do_sample": False, "max_gen_toks": 7}
PROMPTS = ["1753*=", "204*=", "02422*=", "83+="]


@pytest.fixture(scope="module")
def lm() -> GrpolabLM:
    return GrpolabLM(pretrained="embedded", device="cpu")


def _requests(gen_kwargs: dict, repeats: int, prompts=PROMPTS) -> list[Instance]:
    """lm-eval's request list: one Instance per document, each ``repeats`` times in a row."""
    out = []
    for doc_id, prompt in enumerate(prompts):
        instance = Instance("generate_until", {}, (prompt, dict(gen_kwargs)), 0, ("t", doc_id, repeats))
        out += [instance] * repeats
    return out


def test_each_repeat_is_its_own_sample_and_a_seed_reproduces_them(lm: GrpolabLM) -> None:
    requests = _requests(SAMPLED, 6)
    first, again = lm.generate_until(requests), lm.generate_until(requests)
    assert len(first) == len(requests) and first == again
    per_prompt = [first[i * 6 : (i + 1) * 6] for i in range(len(PROMPTS))]
    assert any(len(set(texts)) > 1 for texts in per_prompt)  # independent draws, not one sample copied


def test_another_seed_draws_other_samples() -> None:
    requests = _requests(SAMPLED, 6)
    assert (GrpolabLM(pretrained="embedded", seed=1, device="cpu").generate_until(requests)
            != GrpolabLM(pretrained="embedded", seed=0, device="cpu").generate_until(requests))


def test_do_sample_false_is_greedy_in_every_repeat(lm: GrpolabLM) -> None:
    texts = lm.generate_until(_requests(GREEDY, 3))
    for i in range(len(PROMPTS)):
        assert len(set(texts[i * 3 : (i + 1) * 3])) == 1
    ids, mask = encode_prompts(lm.policy.tokenizer, PROMPTS, use_chat_template=False)
    greedy = sample(lm.policy.model, lm.policy.tokenizer, ids, mask, num_samples=1, max_new_tokens=7, temperature=0.0)
    assert texts[::3] == greedy.texts


def test_until_cuts_each_completion_at_its_first_stop_string(lm: GrpolabLM) -> None:
    whole = lm.generate_until(_requests(GREEDY, 1))
    cut = lm.generate_until(_requests({**GREEDY, "until": ["5"]}, 1))
    assert cut == [text.split("5")[0] for text in whole] and cut != whole


def test_max_gen_toks_bounds_the_completion(lm: GrpolabLM) -> None:
    texts = lm.generate_until(_requests({**GREEDY, "max_gen_toks": 2}, 1))
    assert all(len(t) <= 2 for t in texts) and any(len(t) == 2 for t in texts)  # one character per token


def test_requests_with_other_settings_keep_their_order(lm: GrpolabLM) -> None:
    greedy, sampled = _requests(GREEDY, 1, PROMPTS[:2]), _requests(SAMPLED, 2, PROMPTS[2:])
    mixed = lm.generate_until([greedy[0], *sampled[:2], greedy[1], *sampled[2:]])
    assert [mixed[0], mixed[3]] == lm.generate_until(greedy)


def test_cut_at_stop_takes_the_earliest_stop_string() -> None:
    assert cut_at_stop("ab\n\nQuestion: c", ["Question:", "\n\n"]) == "ab"
    assert cut_at_stop("abc", []) == "abc" and cut_at_stop("abc", [""]) == "abc"


def test_loglikelihood_is_refused_naming_what_works(lm: GrpolabLM) -> None:
    with pytest.raises(NotImplementedError, match=r"generate_until.*--model hf"):
        lm.loglikelihood([])
    with pytest.raises(NotImplementedError, match="generate_until"):
        lm.loglikelihood_rolling([])


def test_an_unknown_model_arg_is_refused_naming_the_ones_it_takes() -> None:
    with pytest.raises(UserError, match=r"temprature.*pretrained, seed"):
        GrpolabLM(pretrained="embedded", temprature=1.0)


def test_registering_keeps_lm_evals_own_models() -> None:
    from lm_eval.api.registry import get_model

    assert register() is GrpolabLM and get_model("grpolab") is GrpolabLM
    assert get_model("hf").__name__ == "HFLM"


def test_the_command_line_ends_a_grpolab_error_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    from grpolab.integrations.lm_eval.__main__ import main

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("sys.argv", ["lm_eval", "--model", "grpolab", "--model_args", "pretrained=embedded,topk=3",
                                     "--tasks", "gsm8k", "--output_path", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and err[-1].startswith("python -m grpolab.integrations.lm_eval: error: ")
    assert "topk" in err[-1]


def test_a_chat_templated_context_gets_no_second_bos() -> None:
    lm = GrpolabLM(pretrained="embedded", device="cpu")
    plain_ids, _ = lm.encode(["12*="])
    lm.policy.tokenizer.chat_template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    context = lm.apply_chat_template([{"role": "user", "content": "12*="}])
    templated_ids, _ = lm.encode([context])
    assert context == "<bos>12*=" and templated_ids.tolist() == plain_ids.tolist()  # one BOS, from the template
