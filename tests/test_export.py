"""`minirl export`: exact rows in both formats, step ranges, round trip through
`minirl import`, clear errors, and a well-behaved pipe."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from torchless_cli import command

from app.cli import main as cli
from monitor import Monitor, RunReader

ROOT = Path(__file__).resolve().parents[1]
VALUES = {
    0: {"reward/mean": 0.1, "mismatch/kl_k1": 1e-300, 'odd, name "q"': 2.0},
    1: {"reward/mean": 1 / 3, "mismatch/kl_k1": math.nan, 'odd, name "q"': -0.0},
    5: {"reward/mean": math.inf, "mismatch/kl_k1": -math.inf},
}


@pytest.fixture
def run(tmp_path):
    with Monitor(tmp_path / "run") as mon:
        for step, scalars in VALUES.items():
            mon.log(step, scalars)
    return tmp_path / "run"


def expected(start=None, end=None):
    return [
        (step, name, VALUES[step][name])
        for step in sorted(VALUES)
        if (start is None or step >= start) and (end is None or step <= end)
        for name in sorted(VALUES[step])
    ]


def same(got, want):
    assert [(s, n) for s, n, _ in got] == [(s, n) for s, n, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want, strict=True):
        assert a == b or (math.isnan(a) and math.isnan(b))  # -0.0 reads back as 0.0


def test_csv_rows_are_exact_and_ordered(run, tmp_path, capsys):
    out = tmp_path / "x.csv"
    assert cli(["export", str(run), "--out", str(out)]) == 0  # format from the suffix
    assert "8 rows" in capsys.readouterr().err
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "name", "value"]
    same([(int(s), n, float(v)) for s, n, v in rows[1:]], expected())
    assert not list(tmp_path.glob("*.part"))


def test_jsonl_is_strict_json_with_nan_and_inf_as_strings(run, tmp_path):
    out = tmp_path / "x.txt"
    assert cli(["export", str(run), "--format", "jsonl", "--out", str(out), "--start", "1"]) == 0

    def no_constants(token):
        raise AssertionError(f"non-standard JSON constant {token}")

    lines = [json.loads(x, parse_constant=no_constants) for x in out.read_text().splitlines()]
    assert {"step": 1, "name": "mismatch/kl_k1", "value": "nan"} in lines
    assert {"step": 5, "name": "mismatch/kl_k1", "value": "-inf"} in lines
    same([(x["step"], x["name"], float(x["value"])) for x in lines], expected(start=1))


def test_stdout_and_step_range(run, capsys):
    assert cli(["export", str(run / "store.sqlite"), "--format", "csv", "--end", "1"]) == 0
    text = capsys.readouterr().out
    rows = list(csv.reader(text.splitlines()))[1:]
    same([(int(s), n, float(v)) for s, n, v in rows], expected(end=1))


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_round_trip_through_minirl_import(run, tmp_path, fmt):
    out = tmp_path / f"x.{fmt}"
    assert cli(["export", str(run), "--out", str(out)]) == 0
    back = tmp_path / f"back_{fmt}"
    assert cli(["import", str(out), "--format", fmt, "--out", str(back)]) == 0
    with RunReader(run) as a, RunReader(back) as b:
        names = a.metric_names()
        assert b.metric_names() == names
        sa, sb = a.scalars(names), b.scalars(names)
        for name in names:
            np.testing.assert_array_equal(sa[name][0], sb[name][0])
            np.testing.assert_array_equal(sa[name][1], sb[name][1])


def test_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert cli(["export", str(tmp_path / "nope"), "--format", "csv"]) == 2
    assert "no run store" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "store.sqlite").write_bytes(b"\x00garbage" * 64)
    assert cli(["export", str(tmp_path / "bad"), "--format", "csv"]) == 2
    assert "not a readable minirl run store" in capsys.readouterr().err
    Monitor(tmp_path / "ok").close()
    assert cli(["export", str(tmp_path / "ok")]) == 2
    assert "--format" in capsys.readouterr().err
    out = tmp_path / "missing_dir" / "x.csv"
    assert cli(["export", str(tmp_path / "ok"), "--out", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_process_survives_a_closed_pipe_and_never_loads_torch(tmp_path):
    with Monitor(tmp_path / "big") as mon:
        for step in range(300):
            mon.log(step, {f"m/{i:02d}": step + i / 7 for i in range(40)})
    proc = subprocess.Popen(
        command("export", str(tmp_path / "big"), "--format", "jsonl"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 0, err
    assert json.loads(first) == {"step": 0, "name": "m/00", "value": 0.0}
    assert "Traceback" not in err
