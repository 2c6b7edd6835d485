"""`minirl import` on the inputs that ended in a traceback (issue 19, hole 2): each is now
a garbage line skipped and counted, and the good lines around it are imported."""

from __future__ import annotations

import struct

import pytest

from app import cli
from monitor import RunReader
from monitor.importers import parse
from monitor.importers.tensorboard import masked_crc


def _import(tmp_path, name: str, data: bytes, capsys) -> tuple[int, str, dict[int, float]]:
    src = tmp_path / name
    src.write_bytes(data)
    rc = cli.main(["import", str(src), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    if rc != 0:
        return rc, err, {}
    with RunReader(tmp_path / "run") as reader:
        steps, values = reader.scalars("good")["good"]
    return rc, err, dict(zip(steps.tolist(), values.tolist(), strict=True))


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        ('{"step": 1e20, "good": 1}', "step is not a step"),  # OverflowError at the store
        ('{"step": 9223372036854775807, "good": 1}', "step is not a step"),
        ('{"step": 5, "good": ' + "9" * 5000 + "}", "Exceeds the limit"),  # ValueError
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),  # RecursionError
        ('{"step": 5, ' + '"a": {' * 200 + "}" * 200 + "}", "nested deeper than 50"),
    ],
)
def test_a_hostile_jsonl_line_is_skipped_and_counted(tmp_path, capsys, garbage, reason):
    data = f'{{"step": 1, "good": 1}}\n{garbage}\n{{"step": 2, "good": 2}}\n'.encode()
    rc, err, got = _import(tmp_path, "log.jsonl", data, capsys)
    assert rc == 0 and got == {1: 1.0, 2: 2.0}
    assert "1 garbage line(s) of 3 skipped" in err and reason in err


def test_values_and_names_a_store_cannot_hold_are_skipped_not_fatal(tmp_path, capsys):
    lines = [
        '{"step": 1, "good": 1, "huge": ' + str(10**400) + "}",  # float() overflowed
        '{"step": 2, "good": 2, "": 3}',  # an empty name stopped the whole import
        '{"step": 3, "good": 3, "\\ud800x": 4}',  # UnicodeEncodeError at the store
    ]
    rc, err, got = _import(tmp_path, "log.jsonl", "\n".join(lines).encode(), capsys)
    assert rc == 0 and got == {1: 1.0, 2: 2.0, 3: 3.0}
    assert "2 value(s) with an empty or invalid metric name skipped" in err


def test_csv_with_a_byte_order_mark_and_a_huge_field(tmp_path, capsys):
    # a spreadsheet's UTF-8 export starts with a BOM: it was "no step column"
    rows = ["step,good", "1,1", f"2,{'x' * 200_000}", '3,"3', "4,4"]
    data = ("\ufeff" + "\n".join(rows)).encode()
    rc, err, got = _import(tmp_path, "log.csv", data, capsys)
    assert rc == 0 and got == {1: 1.0, 3: 3.0, 4: 4.0}  # the open quote spoils nothing
    assert "1 garbage row(s) of 4 skipped" in err and "field larger than field limit" in err


def test_a_csv_row_takes_the_first_step_column_it_fills(tmp_path, capsys):
    """A row's step is its first filled step column; a row that fills none is garbage
    with the reason, and one whose step cell is not a step says which column it read."""
    rows = ["train/global_step,eval/global_step,_step,good", "1,,0,1", ",2,1,2", ",,,3", "x,,3,4"]
    rc, err, got = _import(tmp_path, "log.csv", "\n".join(rows).encode(), capsys)
    assert rc == 0 and got == {1: 1.0, 2: 2.0}
    assert "2 garbage row(s) of 4 skipped" in err
    assert "no step (empty train/global_step, eval/global_step, _step)" in err
    assert "train/global_step='x' is not a step" in err


def _record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    crc = struct.pack("<I", masked_crc(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + crc


def _event(step: int, value_fields: bytes) -> bytes:
    value_msg = b"\x0a" + bytes([len(value_fields)]) + value_fields  # Summary.value
    return b"\x10" + bytes([step]) + b"\x2a" + bytes([len(value_msg)]) + value_msg


def test_tensorboard_records_with_wrong_wire_types(tmp_path):
    good = _event(1, b"\x0a\x04good" + b"\x15" + struct.pack("<f", 1.0))
    tag_varint = _event(2, b"\x08\x05")  # tag as a varint: AttributeError (int.decode)
    floats_varint = _event(3, b"\x0a\x01t\x42\x02\x28\x07")  # tensor float_val varint: TypeError
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(b"".join(_record(e) for e in (good, tag_varint, floats_varint)))
    parsed = parse(path, "tensorboard")
    assert parsed.rows == {1: {"good": 1.0}} and parsed.units == 3


def test_a_tensorboard_step_past_2_53_is_garbage(tmp_path):
    huge = b"\x10" + bytes([0xFF] * 9) + b"\x01"  # step 2^64 - 1 as a varint
    value = b"\x0a\x01a\x15" + struct.pack("<f", 1.0)
    event = huge + b"\x2a" + bytes([len(value) + 2, 0x0A, len(value)]) + value
    path = tmp_path / "events.out.tfevents.2"
    path.write_bytes(_record(event))
    parsed = parse(path, "tensorboard")
    assert parsed.rows == {} and parsed.garbage == 1 and "outside 0..2^53" in parsed.examples[0]
