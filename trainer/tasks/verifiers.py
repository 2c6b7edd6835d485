"""Verifiers: (final answer text, reference answer) -> reward in {0, 1}.

`exact` and `numeric` are built in; `module:function` names a user's own. A verifier only
judges: extracting the final answer from a response is the task's job (`base.py`).
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable

from core.errors import UserError

Verifier = Callable[[str, str], float]

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
NUMERIC_RTOL = 1e-6


def exact(response: str, answer: str) -> float:
    """1 if the stripped strings are equal."""
    return float(response.strip() == answer.strip())


def _last_number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace(",", ""))
    return float(found[-1]) if found else None


def numeric(response: str, answer: str) -> float:
    """1 if the last number in the response equals the answer's last number, within
    a relative 1e-6 (so `x = 12.0` matches `12`)."""
    got, want = _last_number(response), _last_number(answer)
    if got is None or want is None:
        return 0.0
    return float(math.isclose(got, want, rel_tol=NUMERIC_RTOL, abs_tol=NUMERIC_RTOL))


def resolve_verifier(spec: str) -> Verifier:
    """'exact' | 'numeric' | 'module:function' -> a checked verifier."""
    if spec == "exact":
        return exact
    if spec == "numeric":
        return numeric
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UserError(f"task.verifier={spec!r}: cannot import {module_name!r} ({err})") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UserError(f"task.verifier={spec!r}: {module_name} has no function {func_name!r}")
    return _Checked(spec, func)


class _Checked:
    """A user verifier whose every return value is checked to be a reward in {0, 1}."""

    def __init__(self, spec: str, func: Callable[[str, str], object]):
        self.spec, self.func = spec, func

    def __call__(self, response: str, answer: str) -> float:
        try:
            value = self.func(response, answer)
        except Exception as err:  # a user function: report it as theirs, in one line
            raise UserError(
                f"task.verifier={self.spec!r} raised {type(err).__name__}: {err}"
            ) from err
        if isinstance(value, bool) or (isinstance(value, int | float) and value in (0, 1)):
            return float(value)
        raise UserError(
            f"task.verifier={self.spec!r} returned {value!r}; a reward must be a bool, 0 or 1"
        )
