"""A damaged run store: the one error that says which part is unreadable, and the way on.

A store can be damaged in two ways: pages SQLite cannot read (`database disk image is
malformed`, from a disk fault, a copy cut short, a file edited by hand) and records it
reads but that do not decode (a config that is not JSON, a blob of the wrong length).
Reads of a part of a store go through `reading(path, part)`, which turns both into
`StoreDamaged` naming the part, so that `minirl analyze` and `minirl export` can carry
on with what SQLite can still read (salvage.py) and every other reader, the dashboard's
run list included, shows one line instead of a traceback. A lock held too long by a
writer is not damage: it is its own message.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from core.errors import UserError

F = TypeVar("F", bound=Callable[..., Any])

DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError)
"""What decoding a record that SQLite read can raise (json, float(), numpy buffers)."""


class StoreDamaged(UserError):
    """Part of a run store cannot be read; `part` says which (e.g. "events")."""

    def __init__(self, path: Path, part: str, why: str) -> None:
        why = " ".join(why.split())[:200]  # SQLite quotes damaged schema text, newlines too
        self.path, self.part, self.why = path, part, why
        super().__init__(
            f"{path}: {part} unreadable ({why}); `minirl repair {path.parent}` salvages what "
            "SQLite can still read into a new store"
        )


def _why(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    if isinstance(err, sqlite3.DatabaseError):
        return text or type(err).__name__
    return f"{type(err).__name__}: {text}"[:200]


@contextlib.contextmanager
def reading(path: Path, part: str) -> Iterator[None]:
    """Reads of `part` of the store at `path`: damage becomes StoreDamaged naming it."""
    try:
        yield
    except sqlite3.OperationalError as err:
        if "locked" in str(err) or "busy" in str(err):
            raise UserError(
                f"{path}: {part} could not be read: the store stayed locked past the busy "
                "timeout (a writer holding a long transaction); try again"
            ) from None
        raise StoreDamaged(path, part, _why(err)) from None
    except (sqlite3.DatabaseError, *DECODE_ERRORS) as err:
        raise StoreDamaged(path, part, _why(err)) from None


def reads(part: str) -> Callable[[F], F]:
    """Decorate a reader method (of an object with `.path`): its damage names `part`."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
            with reading(self.path, part):
                return method(self, *args, **kwargs)

        return inner  # type: ignore[return-value]

    return wrap
