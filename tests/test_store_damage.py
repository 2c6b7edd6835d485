"""Damaged run stores (issue 19, hole 3): `analyze` and `export` say which part is
unreadable and show the rest, the dashboard's loaders and run list give one line (and
one bad run hides no other), `minirl repair RUN` salvages into a new store without
touching the damaged one; then a few hundred stores damaged byte by byte
(bench/reliability/fuzz_store.py)."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from app import cli
from bench.reliability.fuzz_store import fuzz_damaged_stores, write_template
from monitor import RunReader, list_runs
from monitor.store.damage import StoreDamaged


@pytest.fixture
def runs(tmp_path):
    write_template(tmp_path / "runs" / "damaged")
    write_template(tmp_path / "runs" / "healthy", steps=20)
    return tmp_path / "runs"


def _zero_a_page_of(store, table: str) -> None:
    conn = sqlite3.connect(store)
    pages = [
        r[0]
        for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
            (table,),
        )
    ]
    conn.close()
    data = bytearray(store.read_bytes())
    page = pages[len(pages) // 2]
    data[(page - 1) * 4096 : page * 4096] = bytes(4096)
    store.write_bytes(bytes(data))


def test_analyze_says_which_part_is_unreadable_and_analyses_the_rest(runs, capsys):
    store = runs / "damaged" / "store.sqlite"
    _zero_a_page_of(store, "steps")  # was: DatabaseError, disk image is malformed
    assert cli.main(["analyze", str(runs / "damaged"), "--json"]) == 0
    out, err = capsys.readouterr()
    analysis = json.loads(out)
    note = analysis["notes"][0]
    assert note.startswith("store damaged: steps unreadable (database disk image is malformed)")
    assert "around unreadable pages" in note and "minirl repair" in note
    # the rest: every step (rebuilt from its values), the collapse and its precursors
    assert analysis["last_step"] == 300 and analysis["onset"]["metric"] == "reward/mean"
    assert analysis["precursors"] and "warning: store damaged" in err
    assert "warning: store damaged" in err


def test_export_writes_every_readable_row_once(runs, capsys, tmp_path):
    store = runs / "damaged" / "store.sqlite"
    with RunReader(store) as reader:
        intact = list(reader.rows())
    _zero_a_page_of(store, "scalars")
    out = tmp_path / "rows.csv"
    assert cli.main(["export", str(runs / "damaged"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: scalars of" in err and "unreadable" in err and "uncountable: scalars" in err
    rows = [tuple(line.split(",")[:2]) for line in out.read_text().splitlines()[1:]]
    assert len(rows) == len(set(rows))  # nothing twice across the switch to the salvage
    # nothing lost either: the zeroed page's values were still in their 256-step chunks
    assert set(rows) == {(str(step), name) for step, name, _ in intact}


def test_bad_records_are_one_line_naming_the_part(runs):
    conn = sqlite3.connect(runs / "damaged" / "store.sqlite")
    conn.execute("UPDATE events SET detail = '[1, 2' WHERE kind = 'checkpoint'")
    conn.execute("UPDATE scalar_chunks SET vals = x'0102'")
    conn.commit()
    conn.close()
    with RunReader(runs / "damaged") as reader:
        with pytest.raises(StoreDamaged, match=r"events unreadable \(JSONDecodeError"):
            reader.events()
        with pytest.raises(StoreDamaged, match=r"the series of 'reward/mean' unreadable"):
            reader.scalars("reward/mean")  # was: ValueError from numpy


def test_one_bad_run_never_hides_the_others(runs):
    conn = sqlite3.connect(runs / "damaged" / "store.sqlite")
    conn.execute("UPDATE meta SET value = '{not json' WHERE key = 'config'")
    conn.commit()
    conn.close()
    listed = {s.path.rsplit("/", 1)[-1]: s for s in list_runs(runs)}  # was: JSONDecodeError
    assert listed["healthy"].error is None and listed["healthy"].last_step == 20
    assert "meta (run id, config, controls) unreadable" in listed["damaged"].error
    from dashboard.data import find_runs, load_records

    assert {e.name for e in find_runs(runs)} == {"damaged", "healthy"}
    with pytest.raises(StoreDamaged):
        load_records(str(runs / "damaged"), ("fp",))


def test_repair_salvages_into_a_new_store_and_never_touches_the_damaged_one(runs, capsys):
    store = runs / "damaged" / "store.sqlite"
    _zero_a_page_of(store, "scalars")
    conn = sqlite3.connect(store)
    conn.execute("UPDATE meta SET value = '{not json' WHERE key = 'config'")
    conn.commit()
    conn.close()
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    assert cli.main(["repair", str(runs / "damaged")]) == 0
    out = capsys.readouterr().out
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    assert "row by row, around unreadable pages" in out and "steps: kept 300 of 300" in out
    assert "meta config: unreadable; now {}" in out
    fixed = runs / "damaged-repaired"
    with RunReader(fixed) as reader:
        assert reader.last_step() == 300 and reader.meta().config == {}
        assert reader.events("repaired")[0].detail["method"].startswith("row by row")
        steps, _ = reader.scalars("reward/mean")["reward/mean"]
        assert 0 < len(steps) <= 300
    assert cli.main(["repair", str(runs / "damaged")]) == 2  # never over a store
    assert "already holds a store" in capsys.readouterr().err


def test_salvage_reads_past_a_bad_page_not_only_up_to_it(runs):
    from monitor.store.salvage import salvage

    store = runs / "damaged" / "store.sqlite"
    conn = sqlite3.connect(store)
    conn.execute("DELETE FROM scalar_chunks")  # no second copy of the values to fall back on
    conn.commit()
    conn.close()
    _zero_a_page_of(store, "scalars")
    report = salvage(store, runs / "salvaged")
    assert report.counted["scalars"] is None  # SQLite cannot even count them any more
    with RunReader(runs / "salvaged") as reader:
        series = reader.scalars(reader.metric_names())
    last = {name: int(s[-1]) for name, (s, _) in series.items()}
    assert set(last.values()) == {300}  # every metric read to its end, past the damage
    assert 0 < report.kept["scalars"] < 4 * 300


def test_damaged_stores_fuzzed():
    tally = fuzz_damaged_stores(200)
    assert tally.tracebacks == 0 and tally.bad_messages == 0, "\n".join(tally.failures)
    assert tally.notes["repaired"] > 150 and tally.notes["analyze: read"] > 100


def test_resuming_a_writer_on_a_damaged_store_is_one_line(runs):
    from monitor import Monitor

    conn = sqlite3.connect(runs / "damaged" / "store.sqlite")
    conn.execute("UPDATE meta SET value = '{bad' WHERE key = 'started'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreDamaged, match=r"meta unreadable .*minirl repair"):
        Monitor(runs / "damaged", resume=True)  # was: JSONDecodeError (train --resume)
