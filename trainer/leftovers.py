"""Temporary files a killed process left behind, removed when the next run starts.

Files that appear atomically are first written under a temporary name that ends with
the writer's pid (`step_000004.tmp1234`, `.tmp-<hash>-1234/`), then renamed. A process
killed between the two leaves the temporary one forever. `remove_leftovers` deletes
those whose pid is no longer running (a live writer's, e.g. a concurrent cold start of
the same model, is left alone).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (ours, or another user's)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    return True


def remove_leftovers(folder: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Delete the entries of `folder` whose name matches `pattern` (its group 'pid' is
    the writer's pid) and whose writer is gone; returns what was removed."""
    if not folder.is_dir():
        return []
    removed = []
    for path in folder.iterdir():
        m = pattern.match(path.name)
        if m is None or int(m["pid"]) == os.getpid() or pid_alive(int(m["pid"])):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed
