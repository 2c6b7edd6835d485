"""Errors a user can cause: the CLI prints their message and exits non-zero, no traceback.

Lives in `monitor` because every other package may import `monitor` (and `monitor`
imports none of them).
"""

import signal
import sys
import threading
from collections.abc import Callable
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


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM (a scheduler, `kill`, a container stop) stops a command as Ctrl-C does:
    its cleanup runs (children stopped, ports closed, the run's record and checkpoint
    written) instead of the process vanishing mid-write."""
    raise KeyboardInterrupt


def run_command(name: str, command: Callable[[], int | None]) -> int:
    """Run `minirl NAME` as every command runs: SIGTERM as Ctrl-C, a UserError as one
    line on stderr and its exit code, an interrupt as 'interrupted' and 130."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        return int(command() or 0)
    except UserError as err:
        print(f"minirl {name}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"minirl {name}: interrupted", file=sys.stderr)
        return 130
