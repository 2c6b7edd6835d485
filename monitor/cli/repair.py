"""`minirl repair RUN [--out NEW_RUN]`: salvage a damaged run store into a new run.

Reads what SQLite can still read of RUN's store (monitor/store/salvage.py: SQLite's own
`.recover`, then every row checked) and writes it as a new store in NEW_RUN (default:
RUN-repaired beside it), with a `repaired` event saying where it came from. The damaged
store is never modified, nor even opened: the salvage works on a copy. Prints what was
kept and lost, per table. Needs no torch.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from pathlib import Path

from core.errors import UserError
from monitor.store.schema import STORE_FILE, store_path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="minirl repair", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="the damaged run directory (or its store file)")
    parser.add_argument("--out", type=Path, help="new run directory (default: RUN-repaired)")
    args = parser.parse_args(argv)

    src = store_path(args.run)
    if not src.is_file():
        raise UserError(f"no run store at {src}")
    out = args.out or src.parent.with_name(src.parent.name + "-repaired")
    if (out / STORE_FILE).exists():
        raise UserError(f"{out} already holds a store; choose another --out")
    from monitor.store.salvage import salvage

    try:
        report = salvage(src, out)
    except OSError as err:
        raise UserError(f"cannot salvage {src} into {out}: {err}") from None
    conn = sqlite3.connect(out / STORE_FILE)
    with conn:
        detail = {"from": str(src.resolve()), "method": report.method, "kept": report.kept}
        detail.update(dropped=report.dropped, notes=report.notes)
        conn.execute(
            "INSERT INTO events (step, kind, detail, time) VALUES"
            " ((SELECT max(step) FROM steps), 'repaired', ?, ?)",
            (json.dumps(detail), time.time()),
        )
    conn.close()
    print(
        f"minirl repair: {src} salvaged into {out / STORE_FILE} ({report.method}); unchanged: {src}"
    )
    for line in report.lines():
        print(f"  {line}")
    return 0
