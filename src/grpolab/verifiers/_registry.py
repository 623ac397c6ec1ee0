"""The verifier registry: names and dotted import paths -> reward callables.

A verifier is a plain callable ``fn(completion: str, reference: str) -> float | None``. ``None`` means the
completion could not be scored (TRL's ``trl/rewards/accuracy_rewards.py`` convention). Built-in verifiers
also register a *details* function returning ``(reward, parts)`` so that the extracted answer, the
extraction mode and time-outs can be logged (nano-aha-moment's ``compute_reward`` returns
``(reward, metrics)`` the same way). A name that is not registered but contains a dot is imported as
``package.module:function`` or ``package.module.function`` (as TRL's ``trl/scripts/grpo.py`` resolves
``--reward_funcs``); such a user verifier runs under the built-in hard time limit (``_user``): one that
never returns scores None with a warning.
"""

from __future__ import annotations

from collections.abc import Callable

from grpolab.dotted import import_module
from grpolab.errors import UserError

VerifierFn = Callable[[str, str], "float | None"]
DetailsFn = Callable[[str, str], "tuple[float | None, dict]"]

_VERIFIERS: dict[str, VerifierFn] = {}
_DETAILS: dict[str, DetailsFn] = {}


def register(name: str) -> Callable[[VerifierFn], VerifierFn]:
    """Decorator: register ``fn(completion, reference) -> float | None`` under ``name``.

    Raises:
        ValueError: ``name`` is already registered.
    """

    def decorator(fn: VerifierFn) -> VerifierFn:
        if name in _VERIFIERS:
            raise ValueError(f"verifier {name!r} is already registered; pick another name")
        _VERIFIERS[name] = fn
        return fn

    return decorator


def register_details(name: str, details: DetailsFn) -> VerifierFn:
    """Register a verifier given by its details function; the plain verifier returns only the reward."""

    def verifier(completion: str, reference: str) -> float | None:
        return details(completion, reference)[0]

    verifier.__name__ = verifier.__qualname__ = name
    verifier.__doc__ = details.__doc__
    register(name)(verifier)
    _DETAILS[name] = details
    return verifier


def available() -> list[str]:
    """Names of the registered verifiers."""
    return sorted(_VERIFIERS)


def is_import_path(name: str) -> bool:
    """Whether ``get_verifier(name)`` would import code (a dotted path, not a registered name)."""
    return name not in _VERIFIERS and ("." in name or ":" in name)


def _import_callable(path: str) -> VerifierFn:
    """Import ``pkg.module:function`` or ``pkg.module.function``; ``UserError`` on any failure."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    hint = "write it as 'package.module:function' and make sure the package is installed or on PYTHONPATH"
    if not module_name or not attr:
        raise UserError(f"verifier path {path!r} is not of the form 'package.module:function'; {hint}")
    module = import_module(module_name, path, "verifier", hint)
    fn = getattr(module, attr, None)
    if fn is None:
        raise UserError(f"module {module_name!r} has no attribute {attr!r} (verifier {path!r}); {hint}")
    if not callable(fn):
        raise UserError(f"verifier {path!r} is not callable; it must be fn(completion, reference) -> float")
    return fn


def get_verifier(name_or_dotted_path: str) -> VerifierFn:
    """The verifier registered as ``name_or_dotted_path``, or the callable that dotted path imports (run
    in a worker process under a hard time limit: ``grpolab.verifiers._user``).

    Raises:
        UserError: unknown name, or a dotted path that cannot be imported.
    """
    if name_or_dotted_path in _VERIFIERS:
        return _VERIFIERS[name_or_dotted_path]
    if "." in name_or_dotted_path or ":" in name_or_dotted_path:
        from grpolab.verifiers._user import TimeLimitedVerifier

        return TimeLimitedVerifier(name_or_dotted_path, _import_callable(name_or_dotted_path))
    raise UserError(
        f"unknown verifier {name_or_dotted_path!r}; choose one of {', '.join(available())}, "
        "or give a dotted import path 'package.module:function' to your own fn(completion, reference)"
    )


def score(name: str, completion: str, reference: str) -> float | None:
    """Reward of ``completion`` against ``reference`` under verifier ``name`` (``None``: cannot be scored)."""
    return get_verifier(name)(completion, reference)


def score_with_details(name: str, completion: str, reference: str) -> tuple[float | None, dict]:
    """Like :func:`score`, plus a dict of loggable parts (extracted answer, mode, timed_out, ...).

    User verifiers found by dotted path have no parts: their dict is empty.
    """
    if name in _DETAILS:
        return _DETAILS[name](completion, reference)
    return get_verifier(name)(completion, reference), {}
