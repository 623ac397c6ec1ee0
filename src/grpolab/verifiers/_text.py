"""Bounded text helpers shared by the verifiers: tail capping, ``\\boxed{}`` extraction, number parsing.

Every helper here runs in time linear in a capped input: answers are looked for only in the last
``MAX_TAIL_CHARS`` characters of a completion (a final answer sits at the end; a 1 MB completion costs the
same as an 8 kB one), brace matching is a single pass with a depth bound (no recursion), and the regexes
have no nested quantifiers that could backtrack catastrophically.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

MAX_TAIL_CHARS = 8192
"""Only this many trailing characters of a completion are searched for an answer."""

MAX_BRACE_DEPTH = 64
"""A ``\\boxed{...}`` nested deeper than this is treated as no answer (real answers nest < 10 deep)."""

# ASCII digits only (re.ASCII): a number is 1,234 / 1234 / 1234.50 / -3. Thousands commas must be grouped
# in threes, so "3,4" is two numbers. A minus sign counts only when it does not follow a letter or digit
# ("16-3" is 16 and 3, not 16 and -3).
NUMBER = r"(?:(?<![0-9A-Za-z])-)?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
NUMBER_RE = re.compile(NUMBER, re.ASCII)

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"})


def tail(text: str, max_chars: int = MAX_TAIL_CHARS) -> str:
    """The last ``max_chars`` characters of ``text`` (all of it when shorter)."""
    return text[-max_chars:] if len(text) > max_chars else text


def normalise_minus(text: str) -> str:
    """Map the Unicode minus and dash look-alikes to ASCII ``-``."""
    return text.translate(_MINUS_SIGNS)


def _braced(text: str, start: int, max_depth: int) -> str | None:
    """The content of the ``{...}`` group opening at ``text[start]``; None if unbalanced or too deep."""
    depth = 0
    for i in range(start, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
            if depth > max_depth:
                return None
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def last_boxed(text: str, max_depth: int = MAX_BRACE_DEPTH) -> tuple[str, int] | None:
    """Content and position of the last ``\\boxed{...}`` or ``\\fbox{...}`` in the tail of ``text``.

    Follows Minerva's ``last_boxed_only_string`` (Lewkowycz et al. 2022, also used by PRM800K and
    lm-eval-harness's ``minerva_math``): the *last* box wins, braces nest, and the space form
    ``\\boxed 5`` takes the text up to the next ``$`` or whitespace. Unlike Minerva, a box nested deeper
    than ``max_depth`` or never closed gives None. The position is an index into ``tail(text)``.
    """
    window = tail(text)
    matches = list(_BOXED_RE.finditer(window))
    if not matches:
        return None
    match = matches[-1]
    after = match.end()
    while after < len(window) and window[after] in " \t":
        after += 1
    if after < len(window) and window[after] == "{":
        content = _braced(window, after, max_depth)
        return None if content is None else (content, match.start())
    if after > match.end() and after < len(window):  # "\boxed 5"
        content = re.split(r"[$\s]", window[after:], maxsplit=1)[0]
        return (content, match.start()) if content else None
    return None


def to_decimal(number: str) -> Decimal | None:
    """``"1,234.50"`` -> ``Decimal("1234.50")``; None if ``number`` is not a plain decimal numeral."""
    try:
        value = Decimal(number.replace(",", ""))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def numbers(text: str) -> list[str]:
    """All numerals in ``text`` (ASCII digits; see ``NUMBER``), in order."""
    return NUMBER_RE.findall(normalise_minus(text))
