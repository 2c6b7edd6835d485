"""Errors a user can cause: the CLI prints their message and exits non-zero, no traceback.

Lives in `monitor` because every other package may import `monitor` (and `monitor`
imports none of them).
"""

from pathlib import Path


class UserError(Exception):
    """A bad config, missing file, corrupt store or bad input, explained in one line."""

    exit_code = 2


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of a file a user named; a missing or unreadable file is a UserError
    that starts with `what` and the path (e.g. "config runs/x.yaml: no such file")."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{what} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{what} {path}: cannot read ({err})") from None
