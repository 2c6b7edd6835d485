"""The fuzzing harness: feed a parser hypothesis-generated inputs and tally what happened.

Every input ends one of three ways: accepted, rejected with a `UserError`, or a
traceback (any other exception: the bug this suite hunts). A rejection must be one line
that names the input and says why (`names_input` is the parser's own test of that); a
rejection that does not is counted as a bad message. Tracebacks are counted and the
first few kept with their input, instead of stopping at the first one, so the benchmark
reports how many there are; the tests assert the count is zero.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from core.errors import UserError

KEEP = 3
"""Failing inputs kept per parser for the report."""


@dataclass
class Tally:
    """What `fuzz` saw for one parser."""

    parser: str
    tried: int = 0
    """Inputs hypothesis generated."""
    accepted: int = 0
    """Parsed without an error."""
    rejected: int = 0
    """Refused with a UserError (the bad messages among them too)."""
    tracebacks: int = 0
    """Any other exception: a bug."""
    bad_messages: int = 0
    """Rejections whose message is not one line naming the input and saying why."""
    notes: dict[str, int] = field(default_factory=dict)
    """Counters a parser's check adds (garbage lines skipped, rows kept...)."""
    failures: list[str] = field(default_factory=list)
    """The first KEEP tracebacks or bad messages, each with (the start of) its input."""

    def count(self, key: str, n: int = 1) -> None:
        self.notes[key] = self.notes.get(key, 0) + n

    def _keep(self, what: str, value: Any) -> None:
        if len(self.failures) < KEEP:
            self.failures.append(f"{what} on input {_short(value)}")

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def one_line(message: str) -> bool:
    return bool(message.strip()) and "\n" not in message and len(message) <= 2000


def fuzz(
    name: str,
    strategy: st.SearchStrategy,
    check: Callable[[Any, Tally], None],
    n: int,
    names_input: Callable[[Any, str], bool] = lambda value, message: True,
) -> Tally:
    """Run `check(value, tally)` on `n` generated values. `check` returns normally when
    the parser accepted the value (after asserting what must hold then) and lets the
    parser's UserError through when it refused it. Deterministic (derandomized), so a
    failing input found once is found again."""
    tally = Tally(name)

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(value: Any) -> None:
        tally.tried += 1
        try:
            check(value, tally)
        except UserError as err:
            tally.rejected += 1
            message = str(err)
            if not (one_line(message) and names_input(value, message)):
                tally.bad_messages += 1
                tally._keep(f"bad message {message[:300]!r}", value)
            return
        except Exception as err:  # counting them is the point
            tally.tracebacks += 1
            where = traceback.extract_tb(err.__traceback__)[-1]
            tally._keep(
                f"{type(err).__name__}: {str(err)[:200]} at {where.filename}:{where.lineno}",
                value,
            )
            return
        tally.accepted += 1

    run()
    return tally
