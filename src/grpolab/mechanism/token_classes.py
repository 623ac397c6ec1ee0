"""Token classes of a completion: *content* tokens carry the answer's digits, *format* tokens are the rest.

* **content**: a completion token whose decoded text holds an ASCII digit ``0``-``9`` (``"8"``, ``" 88"``,
  ``"6."``). These carry the numbers of a completion: the answer itself and any number the model restates
  or computes on the way.
* **format**: every other completion token, up to and including the first EOS: words (``"The answer is"``),
  markup (``"####"``, ``"\\boxed{"``), punctuation, whitespace, special tokens and the EOS itself.

Only ASCII digits count, as in the ``gsm8k`` verifier (which scores a number written in other scripts 0).
Tokens after the first EOS (padding) belong to neither class.
"""

from __future__ import annotations

import re

import torch

__all__ = ["CONTENT", "FORMAT", "TOKEN_CLASSES", "content_mask", "is_content_text"]

CONTENT = "content"
FORMAT = "format"
TOKEN_CLASSES = (FORMAT, CONTENT)

_DIGIT = re.compile(r"[0-9]", re.ASCII)


def is_content_text(text: str) -> bool:
    """True when one token's decoded ``text`` holds an ASCII digit (a content token), else False (format)."""
    return _DIGIT.search(text) is not None


def content_mask(completion_ids: torch.Tensor, completion_mask: torch.Tensor, tokenizer) -> torch.Tensor:
    """[B, T] bool: True at content tokens (see the module docstring) inside ``completion_mask`` [B, T].

    Each distinct token id is decoded once, on its own; special tokens (EOS) decode to "" and so are format.
    """
    ids = completion_ids.reshape(-1).tolist()
    special = set(tokenizer.all_special_ids)
    is_content = {t: t not in special and is_content_text(tokenizer.decode([t])) for t in set(ids)}
    flat = torch.tensor([is_content[t] for t in ids], dtype=torch.bool)
    return flat.reshape(completion_ids.shape) & completion_mask.bool()
