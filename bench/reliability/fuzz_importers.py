"""Fuzzed foreign logs: JSONL, CSV, TensorBoard and console files through `minirl import`.

Each file mixes good lines (step k, metric GOOD = k) with garbage: random text, JSON
with hostile values (steps of 1e20 and 2^63, integers of 5000 digits, 10**400, NaN, deep
nesting, empty or surrogate names), CSV rows with stray quotes, wrong field counts or
fields over the csv module's limit, TensorBoard records with wrong wire types, bad
checksums or cut short, console text with broken verl and Hugging Face log lines.
Properties: no traceback; every good line is read whatever the garbage around it
(garbage is skipped and counted, never fatal to the rest); what the parser returns is
what a store can hold (steps in 0..2^53, valid names, floats); and, for every
`import_every`-th file, the whole `minirl import` writes a store holding every good step.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from bench.reliability.fuzzing import Tally, fuzz
from monitor.importers import as_step, as_value, parse
from monitor.importers.tensorboard import masked_crc
from monitor.store.schema import MAX_STEP, name_problem

GOOD = "good/zzq_marker"
"""The metric of the good lines (no generated garbage uses this name)."""

_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63, 2**64, 10**400, -1, 1e20, 9223372036854775807]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["", "\ud800", "nan", "inf", "1e999", " 3 "]),
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, allow_nan=True)  # NaN/Infinity: Python's JSON reads them


_JSONL_GARBAGE = st.one_of(
    st.text(max_size=60),
    _JSON.map(_dumps),
    st.dictionaries(
        st.sampled_from(["step", "_step", "global_step", "name", "value", "", "\ud800", "a"]),
        _JSON,
        max_size=4,
    ).map(_dumps),
    st.integers(2, 6000).map(lambda n: '{"step": 1, "a": ' + "9" * n + "}"),
    st.integers(10, 200_000).map(lambda n: "[" * n + "]" * n),
    st.integers(10, 3000).map(lambda n: '{"step": 2, ' + '"a": {' * n + "}" * n + "}"),
    st.sampled_from(['{"step": 3, "": 1}', '{"step": 4, "\\ud800": 1}', '\ufeff{"step": 5}']),
)


def _mix(draw: st.DrawFn, good: list[str], garbage: st.SearchStrategy[str]) -> list[str]:
    lines = list(good)
    for _ in range(draw(st.integers(0, 8))):
        lines.insert(draw(st.integers(0, len(lines))), draw(garbage))
    return lines


@st.composite
def jsonl_files(draw: st.DrawFn) -> tuple[bytes, dict[int, float]]:
    steps = sorted(draw(st.sets(st.integers(0, 10_000), max_size=6)))
    good = [json.dumps({"step": k, GOOD: float(k)}) for k in steps]
    lines = _mix(draw, good, _JSONL_GARBAGE.filter(lambda t: GOOD not in t))
    bom = "\ufeff" if draw(st.booleans()) else ""
    return (bom + "\n".join(line.replace("\n", " ") for line in lines)).encode(
        "utf-8", "surrogatepass"
    ), {k: float(k) for k in steps}


_CONSOLE_GARBAGE = st.one_of(
    _JSONL_GARBAGE,
    st.text(alphabet="xq.-", min_size=1, max_size=8).map(lambda t: f"step:{t} - a:1"),
    st.text(alphabet="step:-{}'\"0123456789.e nafi()\r\x1b[m,", max_size=40),
    st.sampled_from(
        [
            "step:",
            "step:1 - ",
            "step:99999999999999999999 - a:1",
            "step:3 - a:np.float64( - b:tensor(1, device='cuda:0')",
            "{'loss': np.float64(nan), 'grad_norm': -inf}",
            "{'loss': " + "[" * 5000,
            "{'eval_x': 1}",
            "Traceback (most recent call last):",
        ]
    ),
)


@st.composite
def console_files(draw: st.DrawFn) -> tuple[bytes, dict[int, float]]:
    steps = sorted(draw(st.sets(st.integers(0, 10_000), max_size=6)))
    prefix = st.sampled_from(["", "(TaskRunner pid=7) ", "\x1b[36m(W pid=1)\x1b[0m "])
    good = [f"{draw(prefix)}step:{k} - {GOOD}:np.float64({float(k)}) - x:1" for k in steps]
    lines = _mix(draw, good, _CONSOLE_GARBAGE.filter(lambda t: GOOD not in t))
    return "\n".join(line.replace("\n", " ") for line in lines).encode("utf-8", "surrogatepass"), {
        k: float(k) for k in steps
    }


_CSV_CELL = st.one_of(
    st.text(alphabet='abc,"\t\r 0123456789.-e\x00', max_size=12),
    st.sampled_from(["1e20", "9223372036854775808", "nan", "-1", "", '"', '"open', "\ud800"]),
)


@st.composite
def csv_files(draw: st.DrawFn) -> tuple[bytes, dict[int, float]]:
    steps = sorted(draw(st.sets(st.integers(0, 10_000), max_size=6)))
    width = draw(st.integers(0, 3))
    extra = [f"m{i}" for i in range(width)]
    header = ",".join(["step", GOOD, *extra])
    good = [",".join([str(k), str(float(k)), *["1"] * width]) for k in steps]
    garbage = st.one_of(
        st.lists(_CSV_CELL, max_size=5).map(",".join),
        st.integers(2, 300_000).map(lambda n: f"7,{'x' * n}"),  # over the 128 KiB limit
    ).filter(lambda t: GOOD not in t and not _good_row(t, width + 2))
    lines = [header, *_mix(draw, good, garbage)]
    bom = "\ufeff" if draw(st.booleans()) else ""
    text = bom + "\n".join(line.replace("\n", " ") for line in lines)
    return text.encode("utf-8", "surrogatepass"), {k: float(k) for k in steps}


def _good_row(line: str, fields: int) -> bool:
    """A generated 'garbage' line that is in fact a well-formed row with a number in the
    GOOD column (random cells can spell `0,2,1`; a \\r splits it into lines): data."""
    import csv

    for piece in line.splitlines() or [""]:
        try:
            row = next(csv.reader([piece]), [])
        except csv.Error:
            continue
        if len(row) == fields and as_step(row[0]) is not None and as_value(row[1]) is not None:
            return True
    return False


# ---------------------------------------------------------------------------- TensorBoard


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, wire: int, value: int | bytes) -> bytes:
    key = _varint(number << 3 | wire)
    if wire == 0:
        return key + _varint(int(value))
    if wire == 2:
        return key + _varint(len(value)) + bytes(value)
    return key + bytes(value)  # fixed 64/32: the bytes as given (maybe the wrong length)


def _record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return (
        header
        + struct.pack("<I", masked_crc(header))
        + payload
        + struct.pack("<I", masked_crc(payload))
    )


def _scalar_event(step: int, tag: str, value: float) -> bytes:
    summary_value = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
    return _field(2, 0, step) + _field(5, 2, _field(1, 2, summary_value))


@st.composite
def _message(draw: st.DrawFn, depth: int = 0) -> bytes:
    """Protobuf-shaped bytes with the Event/Summary/Tensor field numbers and any wire type."""
    out = b""
    for _ in range(draw(st.integers(0, 4))):
        number = draw(st.sampled_from([1, 2, 4, 5, 6, 7, 8, 9, 10, 13]))
        wire = draw(st.sampled_from([0, 1, 2, 5]))
        if wire == 0:
            value: int | bytes = draw(st.integers(0, 2**64 - 1))
        elif wire == 2:
            value = (
                draw(_message(depth + 1))
                if depth < 3 and draw(st.booleans())
                else draw(st.binary(max_size=12))
            )
        else:
            value = draw(st.binary(min_size=0, max_size=9))
        out += _field(number, wire, value)
    return out


@st.composite
def tensorboard_files(draw: st.DrawFn) -> tuple[bytes, dict[int, float]]:
    steps = sorted(draw(st.sets(st.integers(0, 10_000), max_size=6)))
    records: list[tuple[bytes, int | None]] = [
        (_record(_scalar_event(k, GOOD, float(k))), k) for k in steps
    ]
    garbage = st.one_of(
        _message().map(_record),
        st.binary(max_size=40).map(_record),
        st.integers(2**53 + 1, 2**64 - 1).map(lambda s: _record(_scalar_event(s, "a", 1.0))),
        _message().map(lambda m: _record(m)[:-1] + b"\x00"),  # bad payload checksum
    )
    for _ in range(draw(st.integers(0, 8))):
        records.insert(draw(st.integers(0, len(records))), (draw(garbage), None))
    data = b"".join(record for record, _ in records)
    cut = len(data)
    if draw(st.integers(0, 9)) == 0:  # the file cut short (a writer killed mid-record)
        cut = draw(st.integers(0, len(data)))
    kept, end = {}, 0
    for record, step in records:  # the good records before the cut are all read
        end += len(record)
        if step is not None and end <= cut:
            kept[step] = float(step)
    tail = draw(st.binary(max_size=20)) if cut < len(data) else b""
    return data[:cut] + tail, kept


# ---------------------------------------------------------------------------- the checks


def _check_parsed(fmt: str, path: Path, expected: dict[int, float], tally: Tally) -> None:
    parsed = parse(path, fmt)
    for step, row in parsed.rows.items():
        assert isinstance(step, int) and 0 <= step <= MAX_STEP, f"step {step!r}"
        for name, value in row.items():
            assert name_problem(name) is None, f"name {name!r}"
            assert isinstance(value, float), f"value {value!r}"
    for step, value in expected.items():
        got = parsed.rows.get(step, {}).get(GOOD)
        assert got == value, f"good step {step} lost among garbage (got {got!r})"
    tally.count("garbage units skipped", parsed.garbage)
    tally.count("good steps kept", len(expected))


def _importer(fmt: str, suffix: str, every: int, tmp: Path) -> Callable[[Any, Tally], None]:
    from monitor.cli.import_logs import main as import_main
    from monitor.store.reader import RunReader

    seen = [0]

    def check(case: tuple[bytes, dict[int, float]], tally: Tally) -> None:
        data, expected = case
        path = tmp / f"log{suffix}"
        path.write_bytes(data)
        _check_parsed(fmt, path, expected, tally)
        seen[0] += 1
        if seen[0] % every:
            return
        out = tmp / "run"
        shutil.rmtree(out, ignore_errors=True)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            import_main([str(path), "--format", fmt, "--out", str(out)])
        tally.count("full imports")
        with RunReader(out) as reader:
            steps, values = reader.scalars(GOOD)[GOOD]
        got = {int(s): float(v) for s, v in zip(steps, values, strict=True) if not math.isnan(v)}
        assert got == expected, f"imported {got}, expected {expected}"

    return check


def _names_file(value: Any, message: str) -> bool:
    return "log." in message or "fuzz-" in message  # the file's path


_CASES = {
    "jsonl": ("JSONL importer", jsonl_files, ".jsonl"),
    "csv": ("CSV importer", csv_files, ".csv"),
    "tensorboard": ("TensorBoard importer", tensorboard_files, ".tfevents"),
    "console": ("console-log importer", console_files, ".log"),
}
FORMATS = tuple(_CASES)
"""The importers fuzzed, by format."""


def fuzz_importer(fmt: str, n: int, import_every: int = 1) -> Tally:
    """`n` fuzzed files of `fmt` (jsonl, csv, tensorboard, console); every `import_every`-th one
    also goes through the whole `minirl import`."""
    name, files, suffix = _CASES[fmt]
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{fmt}-") as tmp:
        check = _importer(fmt, suffix, import_every, Path(tmp))
        return fuzz(name, files(), check, n, _names_file)
