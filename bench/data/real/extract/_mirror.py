"""What every extraction script reads a fetched repository with: `git` on its bare mirror,
and a logged record's numbers (strings, booleans and nulls are not metrics)."""

from __future__ import annotations

import subprocess


def git(git_dir: str, *args: str) -> str:
    """`git --git-dir <git_dir> <args>`'s output (a mirror has no work tree)."""
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], capture_output=True, text=True, check=True
    ).stdout


def numeric(record: dict) -> dict:
    """The record's int and float values, unchanged; everything else dropped."""
    return {
        k: v for k, v in record.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
