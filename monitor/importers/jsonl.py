"""JSON Lines logs: one JSON object per line, one step per object.

Accepted shapes (each line decides for itself):
- wide: `{"_step": 3, "actor/entropy": 0.41, ...}` (a W&B history export, any flat
  logger); the step is the first of STEP_KEYS the row fills (not null or NaN).
- nested: `{"step": 3, "data": {...}}` (verl's file logger); members of `data` or
  `metrics` are merged without a prefix, other nested objects flattened with '/'.
- long: `{"step": 3, "name": "x", "value": 1.0}` (`minirl export --format jsonl`).
A file that is one JSON document is read by its shape: an object with a `log_history`
list (Hugging Face's trainer_state.json), an array of step objects, an object of
columns (pandas' `orient="list"` or `"columns"`; without a step column the row labels
are the steps), an object of step objects keyed by integers (`orient="index"`),
pandas' `orient="split"` and `"table"`, or one step object. A document of none of these
shapes is one garbage unit with the reason. W&B's underscore bookkeeping keys
(`_runtime`, `_timestamp`, ...) are not read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from monitor.importers.parsed import STEP_KEYS, Parsed, as_step

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
    step_key = next((k for k in STEP_KEYS if not _missing(flat.get(k))), None)
    if step_key is None:
        held = [k for k in STEP_KEYS if k in flat]
        looked = f"null {', '.join(held)}" if held else f"looked for {', '.join(STEP_KEYS)}"
        parsed.bad(where, f"no step ({looked})")
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


def _missing(value: object) -> bool:
    """A step key that holds nothing: absent, null, or NaN (pandas writes a row's empty
    cells as null, Python's json as NaN), so a row's step is the first key it fills: a
    W&B history dumped through pandas gives every eval row a null train step."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _columns_as_rows(doc: dict) -> list[tuple[str, dict]] | None:
    """(row label, row) for an object of equal-length lists or of same-keyed objects (a
    table stored by column), or None when `doc` is not one."""
    columns = list(doc.values())
    if len(columns) < 2:
        return None
    if all(isinstance(c, list) for c in columns):
        n = len(columns[0])
        if any(len(c) != n for c in columns):
            return None
        return [(str(i), {k: c[i] for k, c in doc.items()}) for i in range(n)]
    if all(isinstance(c, dict) for c in columns):
        labels = list(dict.fromkeys(label for c in columns for label in c))
        if any(isinstance(v, dict | list) for c in columns for v in c.values()):
            return None
        return [(label, {k: c[label] for k, c in doc.items() if label in c}) for label in labels]
    return None


def _with_step(row: dict, label: str) -> dict:
    """`row`, its label as its step when it has no step of its own."""
    return row if any(k in row for k in STEP_KEYS) else {"step": label, **row}


def _table_row(row: object, schema: object) -> object:
    """A row of pandas' orient="table": its index column (the schema's primary key) is
    the row's label, not a metric."""
    key = schema.get("primaryKey") if isinstance(schema, dict) else None
    if not (isinstance(row, dict) and isinstance(key, list) and len(key) == 1):
        return row
    rest = {k: v for k, v in row.items() if k != key[0]}
    return row if key[0] in STEP_KEYS else _with_step(rest, str(row.get(key[0])))


def _keyed_by_step(doc: dict) -> bool:
    """An object of step objects keyed by their steps (pandas' `orient="index"`)."""
    return all(as_step(k) is not None and isinstance(v, dict) for k, v in doc.items())


def _read_document(doc: object, parsed: Parsed) -> None:
    """Read a whole-file JSON document by its shape (module docstring)."""
    entries: list[tuple[str, object]]
    if isinstance(doc, dict) and isinstance(doc.get("log_history"), list):
        entries = [(f"log_history[{i}]", e) for i, e in enumerate(doc["log_history"])]
        parsed.unit = "log_history entry"
    elif isinstance(doc, dict) and isinstance(doc.get("data"), list) and "schema" in doc:
        entries = [(f"data[{i}]", _table_row(e, doc["schema"])) for i, e in enumerate(doc["data"])]
        parsed.unit = "element"  # orient="table"
    elif isinstance(doc, dict) and set(doc) >= {"columns", "data"}:  # orient="split"
        columns, index = doc["columns"], doc.get("index") or range(len(doc["data"]))
        entries = [
            (f"data[{i}]", _with_step(dict(zip(columns, row, strict=False)), str(label)))
            if isinstance(row, list) and isinstance(columns, list)
            else (f"data[{i}]", row)
            for i, (label, row) in enumerate(zip(index, doc["data"], strict=False))
        ]
        parsed.unit = "row"
    elif isinstance(doc, list):
        entries = [(f"element {i}", e) for i, e in enumerate(doc)]
        parsed.unit = "element"
    elif isinstance(doc, dict) and doc and _keyed_by_step(doc):
        entries = [(f"row {k!r:.40}", _with_step(row, k)) for k, row in doc.items()]
        parsed.unit = "row"
    elif isinstance(doc, dict) and (rows := _columns_as_rows(doc)) is not None:
        entries = [(f"row {label!r:.40}", _with_step(row, label)) for label, row in rows]
        parsed.unit = "row"
    else:  # one step object (or an object that is no log: "no step")
        entries = [("the document", doc)]
        parsed.unit = "document"
    for where, entry in entries:
        parsed.units += 1
        _read_object(entry, where, parsed)


def parse_jsonl(path: Path) -> Parsed:
    """Read a JSONL log or a whole-file JSON document; see the module docstring."""
    parsed = Parsed(unit="line")
    text = path.read_text(encoding="utf-8-sig", errors="replace")  # -sig: a leading BOM
    stripped = text.lstrip()
    # one whole document: an array, or an object whose lines do not each start an object
    if stripped.startswith("[") or (stripped.startswith("{") and "\n{" not in stripped):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None  # not one document: JSON lines (or garbage), read line by line
        if doc is not None:
            _read_document(doc, parsed)
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
