"""TensorBoard event files, read without TensorFlow or tensorboard installed.

An event file is a TFRecord stream: per record a little-endian uint64 length, the masked
CRC-32C of those 8 bytes, the payload, the masked CRC-32C of the payload. Each payload is an
`Event` protobuf (tensorflow/core/util/event.proto); scalars live in its `Summary` as
`simple_value` (tensorboardX, torch.utils.tensorboard, TF1) or as a one-element tensor
(TF2's `tf.summary.scalar`, plugin "scalars"). The protobuf wire format is decoded here
directly: only the handful of fields below are read, everything else is skipped.

Not read: images, audio, histograms, text, graphs (not scalars). A record whose payload
CRC fails or that does not decode is garbage (counted, skipped); a bad length CRC or a
truncated tail ends the file (the framing is lost), counted as one garbage record.
"""

from __future__ import annotations

import struct
from pathlib import Path

from monitor.importers.parsed import Parsed
from monitor.store.schema import MAX_STEP

# Field numbers, from event.proto, summary.proto and tensor.proto.
EVENT_STEP, EVENT_SUMMARY = 2, 5
SUMMARY_VALUE = 1
VALUE_TAG, VALUE_SIMPLE, VALUE_TENSOR, VALUE_METADATA = 1, 2, 8, 9
METADATA_PLUGIN, PLUGIN_NAME = 1, 1
TENSOR_DTYPE, TENSOR_SHAPE, TENSOR_CONTENT = 1, 2, 4
TENSOR_FLOAT, TENSOR_DOUBLE, TENSOR_INT, TENSOR_INT64, TENSOR_HALF = 5, 6, 7, 10, 13
SHAPE_DIM, DIM_SIZE = 2, 1
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_HALF = 1, 2, 3, 9, 19

_WIRE_VARINT, _WIRE_64, _WIRE_LEN, _WIRE_32 = 0, 1, 2, 5


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


# CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven.
def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masking: rotate right by 15 bits and add a constant (mod 2^32)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of one message: ints, or bytes for LEN/fixed types."""
    out, pos, end = [], 0, len(buf)
    while pos < end:
        key = buf[pos]  # one-byte keys and lengths are the common case: skip _varint
        key, pos = (key, pos + 1) if key < 0x80 else _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == _WIRE_VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _WIRE_64:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == _WIRE_32:
            value, pos = buf[pos : pos + 4], pos + 4
        elif wire == _WIRE_LEN:
            if pos >= end:
                raise WireError("truncated length")
            size = buf[pos]
            size, pos = (size, pos + 1) if size < 0x80 else _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        else:
            raise WireError(f"unsupported wire type {wire}")
        if pos > end:
            raise WireError("field runs past the end of the message")
        out.append((number, wire, value))
    return out


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _packed_varints(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _varint(data, pos)
        values.append(value)
    return values


def _tensor_scalar(buf: bytes) -> float | None:
    """The value of a one-element numeric TensorProto, else None."""
    dtype, n_elements = 0, 1
    content, floats, doubles, ints, halves = b"", [], [], [], []
    for number, wire, value in fields(buf):
        if number == TENSOR_DTYPE and wire == _WIRE_VARINT:
            dtype = value
        elif number == TENSOR_SHAPE and wire == _WIRE_LEN:
            for dnum, dwire, dim in fields(value):
                if dnum == SHAPE_DIM and dwire == _WIRE_LEN:
                    sizes = [v for n, w, v in fields(dim) if n == DIM_SIZE and w == _WIRE_VARINT]
                    n_elements *= _signed64(sizes[0]) if sizes else 1
        elif number == TENSOR_CONTENT and wire == _WIRE_LEN:
            content = value
        elif number == TENSOR_FLOAT and wire in (_WIRE_LEN, _WIRE_32):  # packed or one
            floats += struct.unpack(f"<{len(value) // 4}f", value[: len(value) // 4 * 4])
        elif number == TENSOR_DOUBLE and wire in (_WIRE_LEN, _WIRE_64):
            doubles += struct.unpack(f"<{len(value) // 8}d", value[: len(value) // 8 * 8])
        elif number in (TENSOR_INT, TENSOR_INT64) and wire in (_WIRE_LEN, _WIRE_VARINT):
            ints += _packed_varints(value) if wire == _WIRE_LEN else [value]
        elif number == TENSOR_HALF and wire in (_WIRE_LEN, _WIRE_VARINT):
            halves += _packed_varints(value) if wire == _WIRE_LEN else [value]
    if n_elements != 1:
        return None
    if content:
        fmt = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q", DT_HALF: "<e"}
        if dtype in fmt and len(content) == struct.calcsize(fmt[dtype]):
            return float(struct.unpack(fmt[dtype], content)[0])
        return None
    if dtype == DT_FLOAT and floats:
        return float(floats[0])
    if dtype == DT_DOUBLE and doubles:
        return float(doubles[0])
    if dtype in (DT_INT32, DT_INT64) and ints:
        return float(_signed64(ints[0]))
    if dtype == DT_HALF and halves:
        return float(struct.unpack("<e", struct.pack("<H", halves[0] & 0xFFFF))[0])
    return None


def _plugin_name(buf: bytes) -> str:
    for number, wire, value in fields(buf):
        if number == METADATA_PLUGIN and wire == _WIRE_LEN:
            for pnum, pwire, pval in fields(value):
                if pnum == PLUGIN_NAME and pwire == _WIRE_LEN:
                    return pval.decode("utf-8", "replace")
    return ""


def _read_event(payload: bytes, plugins: dict[str, str], parsed: Parsed, where: str) -> None:
    """The scalars of one Event. A field of the wrong wire type is not the field (a
    protobuf reader skips it); a step outside 0..MAX_STEP makes the record garbage."""
    step, summaries = 0, []
    for number, wire, value in fields(payload):
        if number == EVENT_STEP and wire == _WIRE_VARINT:
            step = _signed64(value)
        elif number == EVENT_SUMMARY and wire == _WIRE_LEN:
            summaries.append(value)
    if summaries and not 0 <= step <= MAX_STEP:
        parsed.bad(where, f"step {step} is outside 0..2^53")
        return
    for summary in summaries:
        for number, wire, value_msg in fields(summary):
            if number != SUMMARY_VALUE or wire != _WIRE_LEN:
                continue
            tag, simple, tensor, metadata = None, None, None, None
            for vnum, vwire, v in fields(value_msg):
                if vnum == VALUE_TAG and vwire == _WIRE_LEN:
                    tag = v.decode("utf-8")
                elif vnum == VALUE_SIMPLE and vwire == _WIRE_32:
                    simple = struct.unpack("<f", v)[0]
                elif vnum == VALUE_TENSOR and vwire == _WIRE_LEN:
                    tensor = v
                elif vnum == VALUE_METADATA and vwire == _WIRE_LEN:
                    metadata = v
            if tag is None:
                continue
            if metadata is not None:
                plugins.setdefault(tag, _plugin_name(metadata))
            if simple is not None:
                parsed.add(step, tag, float(simple))
            elif tensor is not None and plugins.get(tag, "scalars") in ("scalars", ""):
                # TF2 writes the plugin metadata only with a tag's first event.
                value = _tensor_scalar(tensor)
                if value is not None:
                    parsed.add(step, tag, value)


def _read_file(path: Path, parsed: Parsed, plugins: dict[str, str]) -> None:
    data = path.read_bytes()
    pos, index = 0, 0
    while pos < len(data):
        index += 1
        where = f"{path.name} record {index}"
        parsed.units += 1
        if pos + 12 > len(data):
            parsed.bad(where, "truncated record header (file ends mid-record)")
            return
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if masked_crc(header) != length_crc:
            parsed.bad(where, "bad length checksum; the rest of the file is unreadable")
            return
        start, end = pos + 12, pos + 12 + length
        if end + 4 > len(data):
            parsed.bad(where, "truncated record (file ends mid-record)")
            return
        payload = data[start:end]
        (payload_crc,) = struct.unpack("<I", data[end : end + 4])
        pos = end + 4
        if masked_crc(payload) != payload_crc:
            parsed.bad(where, "bad payload checksum")
            continue
        # Also catches malformed scalar payloads (e.g. a truncated fixed32 float).
        try:
            _read_event(payload, plugins, parsed, where)
        except (WireError, struct.error, UnicodeDecodeError) as err:
            parsed.bad(where, f"not an Event protobuf ({err})")


def event_files(path: Path) -> list[Path]:
    """`path` itself, or the event files under a log directory (sorted: TB's own order)."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*tfevents*") if p.is_file())
    return [path]


def run_dirs(path: Path) -> dict[str, list[Path]]:
    """The event files under `path` per run, as TensorBoard groups them: a run is a
    directory holding event files (a resumed run's several files are one run), named by
    its path below `path` ("." for `path` itself, or for one event file)."""
    runs: dict[str, list[Path]] = {}
    for file in event_files(path):
        name = "." if file == path else file.parent.relative_to(path).as_posix()
        runs.setdefault(name, []).append(file)
    return runs


def parse_tensorboard(path: Path) -> Parsed:
    """Read the scalars of an event file, or of every event file under a directory: one
    run, or, for a log dir of several, every run (`Parsed.runs`, `Parsed.by_run`)."""
    parsed = Parsed(unit="record")
    runs = run_dirs(path)
    for run, files in runs.items():
        one = parsed if len(runs) == 1 else Parsed(unit="record")
        plugins: dict[str, str] = {}
        for file in files:
            _read_file(file, one, plugins)
        if one is not parsed:
            parsed.absorb(one, run)
    return parsed
