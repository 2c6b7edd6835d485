"""W&B run files: an offline run written by the real `wandb` package is read back with no
login and no network (`minirl import` and `minirl watch`), including a row too large for
one 32 KiB block; corrupt bytes are skipped and counted, not fatal."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.cli import main
from monitor.importers.wandb import BLOCK, history_rows, read_log, run_file
from monitor.store.reader import RunReader

pytest.importorskip("wandb")

STEPS = 30
BIG_STEP = 7  # this row carries 3000 extra keys: its record spans several blocks

WRITER = textwrap.dedent(
    """
    import os, sys
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    import wandb
    root, steps, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run = wandb.init(project="attach", dir=root, config={"lr": 1e-6})
    for s in range(steps):
        row = {"actor/grad_norm": 1.0 + s / 100, "critic/score/mean": s / 30,
               "nested": {"kl": 1e-3 * s}, "note": "text",
               "actor/entropy": float("nan") if s == 11 else 0.5}
        if s == big:
            row.update({f"wide/k{i:04d}": float(i) for i in range(3000)})
        if s == 13:  # a trainer's step key that is not a step: W&B's own step stands
            row["train/global_step"] = float("nan")
        run.log(row, step=s)
    run.finish()
    """
)


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wandb-offline")
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(root), str(STEPS), str(BIG_STEP)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return root / "wandb"


def _series(run: Path) -> dict[str, dict[int, float]]:
    with RunReader(run) as reader:
        return {
            name: dict(zip(s.tolist(), v.tolist(), strict=True))
            for name, (s, v) in reader.scalars(reader.metric_names()).items()
        }


def _check(series: dict[str, dict[int, float]]) -> None:
    assert sorted(series["optim/grad_norm"]) == list(range(STEPS))  # actor/grad_norm, mapped
    assert series["optim/grad_norm"][20] == pytest.approx(1.2)
    assert series["reward/mean"][15] == pytest.approx(0.5)  # critic/score/mean
    assert series["nested/kl"][10] == pytest.approx(1e-2)  # nested keys joined with '/'
    assert math.isnan(series["policy/entropy"][11]) and series["policy/entropy"][12] == 0.5
    assert series["wide/k2999"] == {BIG_STEP: 2999.0}  # the multi-block record
    assert "note" not in series and "_runtime" not in series


def test_offline_run_imports_with_every_value(wandb_dir, tmp_path, capsys):
    file = run_file(wandb_dir)
    assert file.read_bytes()[:4] == b":W&B" and file.stat().st_size > 2 * BLOCK
    assert main(["import", str(wandb_dir), "--out", str(tmp_path / "run")]) == 0
    assert "(wandb)" in capsys.readouterr().out
    _check(_series(tmp_path / "run"))


def test_framing_reads_the_same_records_in_any_pieces(wandb_dir):
    data = run_file(wandb_dir).read_bytes()
    whole = read_log(data)
    assert not whole.bad and whole.end == len(data)
    got, end = [], 0
    for cut in [*range(5, len(data), 4093), len(data)]:  # cuts inside chunks and headers
        framed = read_log(data[end:cut], end)
        got += framed.records
        end = framed.end
    assert got == whole.records


def test_corrupt_bytes_are_skipped_and_counted(wandb_dir, tmp_path, capsys):
    data = bytearray(run_file(wandb_dir).read_bytes())
    rows = history_rows(read_log(bytes(data)).records)
    big_at = next(int(where.split()[1]) for where, step, _ in rows if step == BIG_STEP)
    data[big_at + 1000] ^= 0xFF  # in the big row's first piece: that row is lost, not others
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(bytes(data))
    assert main(["import", str(bad), "--out", str(tmp_path / "run")]) == 0
    assert "corrupt chunk skipped" in capsys.readouterr().err
    series = _series(tmp_path / "run")
    assert sorted(series["optim/grad_norm"]) == [s for s in range(STEPS) if s != BIG_STEP]
    assert "wide/k2999" not in series


def test_not_a_run_file_is_a_clear_error(tmp_path, capsys):
    fake = tmp_path / "x.wandb"
    fake.write_bytes(b"LEVELDB?" * 10)
    assert main(["import", str(fake), "--out", str(tmp_path / "run")]) != 0
    err = capsys.readouterr().err
    assert "is not a W&B run file" in err and "Traceback" not in err


def test_watch_follows_a_growing_run_file(wandb_dir, tmp_path, capsys):
    """The run file is copied over in pieces cut anywhere while the watcher polls."""
    from monitor.monitor import Monitor
    from monitor.watch.loop import Watcher
    from monitor.watch.sources import WandbSource

    data = run_file(wandb_dir).read_bytes()
    live = tmp_path / "live" / "run-live.wandb"
    live.parent.mkdir()
    live.write_bytes(b"")
    with Monitor(tmp_path / "run") as mon:
        watcher = Watcher(mon, WandbSource(live.parent))
        with live.open("ab") as out:
            for start in range(0, len(data), 5000):
                out.write(data[start : start + 5000])
                out.flush()
                watcher.poll()
        watcher.drain()
    _check(_series(tmp_path / "run"))
