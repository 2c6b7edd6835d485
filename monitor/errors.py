"""Errors a user can cause: the CLI prints their message and exits non-zero, no traceback.

Lives in `monitor` because every other package may import `monitor` (DESIGN.md ties).
"""


class UserError(Exception):
    """A bad config, missing file, corrupt store or bad input, explained in one line."""

    exit_code = 2
