"""What the extraction scripts share: `git` on a fetched repository's bare mirror, a logged
record's numbers (strings, booleans and nulls are not metrics), a console line's
`name=value` fields, the records of one step joined, the check that steps rise, and the
corpus file."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

NAME_VALUE = re.compile(r"^([A-Za-z_][\w/]*)=(\S+)$")


def git(git_dir: str | Path, *args: str) -> str:
    """`git --git-dir <git_dir> <args>`'s output (a mirror has no work tree)."""
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=True
    ).stdout


def git_bytes(git_dir: str | Path, *args: str) -> bytes:
    """The same output, as bytes: a binary blob, unread as text."""
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], capture_output=True, check=True
    ).stdout


def numeric(record: dict) -> dict:
    """The record's int and float values, unchanged; everything else dropped."""
    return {
        k: v for k, v in record.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }


def name_values(parts: Iterable[str], where: str) -> dict[str, float]:
    """A console line's `name=value` fields as numbers; a field of another form is an
    error (at `where`), not text to skip."""
    out = {}
    for part in parts:
        field = NAME_VALUE.match(part.strip())
        if field is None:
            raise ValueError(f"{where}: {part!r} is not name=value")
        out[field.group(1)] = float(field.group(2))
    return out


def write_rows(out_dir: str, run_id: str, rows: list[dict]) -> None:
    """`<out_dir>/<run_id>.jsonl`: one JSON object per logged step, as the corpus reads it."""
    Path(out_dir, f"{run_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def increasing(rows: list[dict]) -> list[dict]:
    """`rows`, once their `step`s are checked to rise strictly (a log cut and resumed, or
    two runs joined, would repeat or go back)."""
    steps = [r["step"] for r in rows]
    if any(b <= a for a, b in itertools.pairwise(steps)):
        raise ValueError("steps do not rise strictly")
    return rows


def same_step_joined(records: list[dict]) -> list[dict]:
    """Consecutive records of one step made one row, when they share no metric (an
    evaluation written as its own record beside the step's training record); records that
    would overwrite each other are left apart, for `increasing` to refuse."""
    rows: list[dict] = []
    for record in records:
        last = rows[-1] if rows else None
        if (
            last is not None
            and last["step"] == record["step"]
            and not ((last.keys() & record.keys()) - {"step"})
        ):
            last.update(record)
        else:
            rows.append(dict(record))
    return rows
