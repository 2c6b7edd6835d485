"""JSON Lines logs: one JSON object per line, one step per object.

Accepted shapes (each line decides for itself):
- wide: `{"_step": 3, "actor/entropy": 0.41, ...}` — a W&B history export, or any logger
  that writes one flat dict per step. The step is the first present of STEP_KEYS.
- nested: `{"step": 3, "data": {...}}` — verl's file logger; members of `data` or
  `metrics` are merged without a prefix, other nested objects are flattened with '/'.
- long: `{"step": 3, "name": "x", "value": 1.0}` — what `minirl export --format jsonl`
  writes, so an export re-imports as itself.
A whole-file JSON object with a `log_history` list (Hugging Face's trainer_state.json,
written by TRL next to every checkpoint) is read as if each entry were a line.

Not read: W&B's `_runtime`, `_timestamp` and other underscore bookkeeping keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from monitor.importers.parsed import Parsed, as_step

# In order of preference: W&B's own step, then the trainers' step keys.
STEP_KEYS = ("_step", "step", "global_step", "train/global_step", "trainer/global_step", "Step")
_MERGED = ("data", "metrics")


MAX_DEPTH = 50
"""Nesting levels of one record that are flattened; deeper is garbage (a log is flat)."""


class _TooDeep(ValueError):
    pass


def _flatten(obj: dict, prefix: str, out: dict, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise _TooDeep
    for key, value in obj.items():
        if isinstance(value, dict):
            inner = "" if (not prefix and key in _MERGED) else f"{prefix}{key}/"
            _flatten(value, inner, out, depth + 1)
        else:
            out[f"{prefix}{key}"] = value


def _read_object(obj: object, where: str, parsed: Parsed) -> None:
    if not isinstance(obj, dict):
        parsed.bad(where, f"a JSON {type(obj).__name__}, not an object")
        return
    flat: dict = {}
    try:
        _flatten(obj, "", flat)
    except _TooDeep:
        parsed.bad(where, f"objects nested deeper than {MAX_DEPTH} levels")
        return
    step_key = next((k for k in STEP_KEYS if k in flat), None)
    if step_key is None:
        parsed.bad(where, f"no step (looked for {', '.join(STEP_KEYS)})")
        return
    step = as_step(flat.pop(step_key))
    if step is None:
        parsed.bad(where, f"{step_key} is not a step (an integer in 0..2^53)")
        return
    if set(flat) >= {"name", "value"} and isinstance(flat["name"], str):  # long format
        parsed.add_long(step, flat["name"], flat["value"], where)
    else:  # wide: every field but the step and private ones (`_runtime`...)
        metrics = ((k, v) for k, v in flat.items() if not k.startswith("_") and k not in STEP_KEYS)
        parsed.add_fields(step, metrics)


def parse_jsonl(path: Path) -> Parsed:
    """Read a JSONL log (or a trainer_state.json); see the module docstring for shapes."""
    parsed = Parsed(unit="line")
    text = path.read_text(encoding="utf-8-sig", errors="replace")  # -sig: a leading BOM
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped:  # maybe one whole JSON document
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
            parsed.unit = "log_history entry"
            for i, entry in enumerate(doc["log_history"]):
                parsed.units += 1
                _read_object(entry, f"log_history[{i}]", parsed)
            return parsed
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            read_line(line, f"line {lineno}", parsed)
    return parsed


def read_line(line: str | bytes, where: str, parsed: Parsed) -> None:
    """One line of a JSON Lines log into `parsed`: a unit, and garbage unless it is a
    JSON object with a step (the file importer, `minirl watch` and console logs read
    their JSON lines with it)."""
    parsed.units += 1
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        parsed.bad(where, f"not JSON ({err.msg})")
        return
    except ValueError as err:  # an integer of more than 4300 digits, bytes not UTF-8
        parsed.bad(where, f"not readable JSON ({str(err).split(':')[0]})")
        return
    except RecursionError:
        parsed.bad(where, "JSON nested too deeply")
        return
    _read_object(obj, where, parsed)
