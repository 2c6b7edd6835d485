"""`minirl bench reliability [--fuzz N] [--kills K] [--reps R] [--quick]`: faults and fuzzing.

Injects every fault of issue 19 into the real commands and fuzzes every input parser,
then writes bench/results/reliability.md (+ .json): each fault, how many times it was
injected and what was lost; per parser, the inputs tried and the tracebacks (0 is the
only passing number). The default suite runs the fast cases (tests/test_reliability.py,
tests/test_fuzz_inputs.py, tests/test_store_damage.py) with a few hundred inputs each.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import RESULTS


def _fuzzing(n: int, log) -> list[dict]:
    from bench.reliability import fuzz_configs, fuzz_importers, fuzz_operator, fuzz_store

    targets = [
        lambda: fuzz_configs.fuzz_config_files(n),
        lambda: fuzz_configs.fuzz_overrides(n),
        *[lambda f=f: fuzz_importers.fuzz_importer(f, n) for f in fuzz_importers.FORMATS],
        lambda: fuzz_store.fuzz_damaged_stores(n),
        lambda: fuzz_operator.fuzz_action_requests(n),
        lambda: fuzz_operator.fuzz_import_form(n),
        lambda: fuzz_operator.fuzz_operator_token(n),
        lambda: fuzz_operator.fuzz_webhook(n),
        lambda: fuzz_operator.fuzz_monitor_writer(n),
    ]
    out = []
    for target in targets:
        t0 = time.monotonic()
        tally = target()
        took = time.monotonic() - t0
        log(
            f"  fuzz {tally.parser}: {tally.tried} inputs, {tally.tracebacks} tracebacks "
            f"({took:.0f} s)"
        )
        out.append(tally.as_row())
    return out


def _faults(work: Path, kills: int, reps: int, log) -> tuple[list[list[Any]], list[str]]:
    from bench.reliability import disk_full, kill_train, kill_writer, signals
    from bench.reliability.fuzz_store import write_template

    rows, failed = [], []

    def add(fault: str, times: Any, lost: str, ok: bool | None) -> None:
        rows.append([fault, times, lost, {True: "yes", False: "NO", None: "skipped"}[ok]])
        if ok is False:
            failed.append(fault)
        log(f"  {fault}: {rows[-1][3]}")

    trials = kill_train.main_loop(work / "train", reps, log=log)
    for phase in kill_train.PHASES:
        ts = [t for t in trials if t.phase == phase]
        rerun = sum(t.rerun for t in ts)
        lost = [f"{t.lost or ''}{t.mismatched or ''}{t.leftovers or ''}" for t in ts if not t.ok]
        what = "; ".join(lost) or f"nothing ({rerun} uncheckpointed steps re-run, identical)"
        add(f"SIGKILL `minirl train`: {phase}", len(ts), what, all(t.ok for t in ts))
    w = kill_writer.run(work / "writer", kills)
    bad = w.gaps + w.incomplete + w.wrong_values + w.integrity_failures
    what = f"nothing: {w.steps} contiguous, complete steps, integrity ok"
    if bad:
        what = f"{w.gaps} gaps, {w.incomplete} incomplete, {w.wrong_values} wrong values"
    add("SIGKILL a `Monitor` writer (tight loop)", w.kills, what, not bad)
    errors = f"{w.lock_errors} lock errors, {len(w.other_read_errors)} other errors"
    errors += "".join(f"; e.g. {e}" for e in sorted(set(w.other_read_errors))[:2])
    clean = w.lock_errors == 0 and not w.other_read_errors
    add(
        "readers polling the store being written (RunReader, analyze, export)",
        w.reads,
        errors,
        clean,
    )
    s = disk_full.store_write(work)
    what = f"nothing: {s['steps_kept']} steps kept; one error: {s['error']}"
    add(f"disk full during a store write ({s['how']})", 1, what, s["ok"])
    c = disk_full.checkpoint_write(work)
    what = f"nothing: {c.get('steps_kept')} steps kept, no partial file; one error: "
    what += c.get("error", "")
    add(
        f"disk full during a checkpoint write ({c['how']})", int(c["ok"] is not None), what, c["ok"]
    )
    runs = work / "runs"
    write_template(runs / "a", steps=20)
    for name, sig in {**signals.SIGNALS, "SIGKILL": signal.SIGKILL}.items():
        d = signals.dashboard(runs, sig, work / "dashboard.log")
        what = f"{d.get('children_left')} of {d.get('children')} children left, "
        add(
            f"{name} `minirl dashboard`", 1, what + f"port open: {d.get('port_left_open')}", d["ok"]
        )
    config = work / "signal.yaml"
    from core.typed_config import yaml_dump

    config.write_text(yaml_dump(kill_train.tiny_config(work / "train" / "cache")))
    for name, sig in signals.SIGNALS.items():
        t = signals.train(config, work / f"signal-{name}", sig, work / "train-signal.log")
        what = f"exit {t.get('exit')}, stop reason {t.get('stop_reason')}, "
        what += f"files left {t.get('files_left')}, resume exit {t.get('resume_exit')}"
        add(f"{name} `minirl train`", 1, what, t["ok"])
        (work / f"watch-{name}").mkdir()
        wt = signals.watch(work / f"watch-{name}", sig, work / "watch.log")
        what = f"exit {wt.get('exit')}, last event {wt.get('last_event')}, "
        add(f"{name} `minirl watch`", 1, what + f"port open: {wt.get('port_left_open')}", wt["ok"])
    return rows, failed


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl bench reliability", description=__doc__.split("\n")[0])
    p.add_argument("--fuzz", type=int, default=2000, help="inputs per parser (2000)")
    p.add_argument("--kills", type=int, default=16, help="SIGKILLs of the Monitor writer (16)")
    p.add_argument("--reps", type=int, default=3, help="SIGKILLs of `minirl train` per phase (3)")
    p.add_argument("--quick", action="store_true", help="--fuzz 100 --kills 4 --reps 1")
    p.add_argument("--out", type=Path, default=RESULTS / "reliability.md")
    args = p.parse_args(argv)
    if args.quick:
        args.fuzz, args.kills, args.reps = 100, 4, 1
    t0 = time.monotonic()

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="minirl-reliability-") as tmp:
        log("faults:")
        faults, failed = _faults(Path(tmp), args.kills, args.reps, log)
    log("fuzzing:")
    fuzzing = _fuzzing(args.fuzz, log)
    failed += [f"fuzz {t['parser']}" for t in fuzzing if t["tracebacks"] or t["bad_messages"]]
    command = "minirl bench reliability " + " ".join(argv)
    from bench.reliability.report import write

    results = {"faults": faults, "fuzzing": fuzzing, "failed": failed}
    out = write(results, args.out, command.strip(), time.monotonic() - t0)
    print(f"minirl bench reliability: {out} ({len(failed)} failed checks)")
    return 1 if failed else 0
