"""SIGTERM and SIGINT of every long-running command: `minirl dashboard`, `minirl train`,
`minirl watch`. Each is started for real, signalled once it is serving (or training, or
following), and then checked: its children stopped, its ports closed, no temporary
file left, the run's record closed. A `minirl dashboard` killed outright (SIGKILL) must
not leave its Streamlit server either (Linux: the child dies with its parent)."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path

from bench.reliability import procs

TIMEOUT_S = 120.0


def _events(run: Path) -> list[tuple[str, dict]]:
    conn = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
    try:
        return [(k, json.loads(d)) for k, d in conn.execute("SELECT kind, detail FROM events")]
    finally:
        conn.close()


def _leftovers(run: Path) -> list[str]:
    pats = ("*.tmp[0-9]*", ".tmp-*", "*.part")
    return sorted(str(p.relative_to(run)) for pat in pats for p in run.rglob(pat))


def dashboard(runs: Path, sig: int, log: Path) -> dict:
    """Serve `runs`, wait for the Streamlit child to listen, send `sig` to the parent."""
    port = procs.free_port()
    proc = procs.minirl("dashboard", str(runs), "--port", str(port), log=log)
    kids: list[int] = []
    try:
        if not procs.wait_for(lambda: procs.port_open(port), TIMEOUT_S, proc):
            return {"ok": False, "why": f"the dashboard never served (see {log})"}
        kids = procs.children(proc.pid)
        code = procs.stop(proc, sig)
        gone = procs.wait_for(lambda: not any(procs.alive(k) for k in kids), 15)
        closed = procs.wait_for(lambda: not procs.port_open(port), 15)
    finally:
        procs.stop(proc)
        procs.reap(kids)
    left = sum(procs.alive(k) for k in kids)
    return {
        "ok": gone and closed,
        "exit": code,
        "children": len(kids),
        "children_left": left,
        "port_left_open": not closed,
    }


def train(config: Path, run: Path, sig: int, log: Path) -> dict:
    """Train, wait for step 2 in the store, send `sig`: the run must record why it
    stopped, write its last checkpoint, leave no partial file; `--resume` then finishes."""
    args = ("train", str(config), "--run-dir", str(run), "--quiet")
    proc = procs.minirl(*args, log=log)
    store = run / "store.sqlite"

    def stepped() -> bool:
        try:
            conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1)
            return (conn.execute("SELECT max(step) FROM steps").fetchone()[0] or 0) >= 2
        except sqlite3.Error:
            return False

    try:
        if not procs.wait_for(stepped, TIMEOUT_S, proc, poll_s=0.05):
            return {"ok": False, "why": f"no step 2 (see {log})"}
        kids = procs.children(proc.pid)
        code = procs.stop(proc, sig)
    finally:
        procs.stop(proc)
    events = _events(run)
    reasons = [d.get("reason") for k, d in events if k == "stop"]
    left = _leftovers(run)
    resumed = procs.minirl(*args, "--resume", log=log).wait(timeout=600)
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    steps = [r[0] for r in conn.execute("SELECT step FROM steps ORDER BY step")]
    conn.close()
    contiguous = steps == list(range(steps[-1] + 1)) if steps else False
    ok = code == 130 and reasons == ["interrupted"] and not left and resumed == 0 and contiguous
    return {
        "ok": ok,
        "exit": code,
        "stop_reason": reasons,
        "children_left": sum(procs.alive(k) for k in kids),
        "files_left": left,
        "resume_exit": resumed,
        "steps_contiguous": contiguous,
    }


def watch(workdir: Path, sig: int, log: Path) -> dict:
    """Follow a JSONL log being appended (with its Prometheus port), send `sig`."""
    source, run, port = workdir / "live.jsonl", workdir / "watched", procs.free_port()
    source.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2)))
    proc = procs.minirl(
        "watch",
        str(source),
        "--out",
        str(run),
        "--poll",
        "0.05",
        "--prometheus-port",
        str(port),
        log=log,
    )
    try:
        if not procs.wait_for(lambda: procs.port_open(port), TIMEOUT_S, proc):
            return {"ok": False, "why": f"watch never served /metrics (see {log})"}
        with source.open("a") as f:
            for s in range(3, 50):
                f.write(json.dumps({"step": s, "loss": 1.0 / s}) + "\n")
        time.sleep(0.5)
        kids = procs.children(proc.pid)
        code = procs.stop(proc, sig)
    finally:
        procs.stop(proc)
    closed = procs.wait_for(lambda: not procs.port_open(port), 15)
    kinds = [k for k, _ in _events(run)]
    ok = code == 0 and closed and kinds[-1] == "close" and not _leftovers(run)
    return {
        "ok": ok,
        "exit": code,
        "port_left_open": not closed,
        "last_event": kinds[-1],
        "children_left": sum(procs.alive(k) for k in kids),
    }


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}
