"""Processes for the fault-injection suite: start a `minirl` command, wait for a state,
kill it with a signal, and see what it left (children, listening ports, files)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import REPO


def minirl(*args: str, log: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    """`python -m app.cli ARGS` in its own session, output to `log` (or discarded)."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (the child owns it)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
            start_new_session=True,
        )
    finally:
        if log:
            out.close()


def python(code: str, *args: str, log: Path | None = None) -> subprocess.Popen:
    """`python -c CODE ARGS` from the checkout, in its own session."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code, *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
            start_new_session=True,
        )
    finally:
        if log:
            out.close()


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    proc: subprocess.Popen | None = None,
    poll_s: float = 0.005,
) -> bool:
    """True once `condition()` holds; False on timeout or if `proc` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc is not None and proc.poll() is not None:
            return condition()
        time.sleep(poll_s)
    return False


def children(pid: int) -> list[int]:
    """Every descendant pid of `pid` (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout_s: float = 60.0) -> int:
    """Send `sig`, wait for the exit; returns the exit code (-sig when killed by it)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def reap(pids: list[int]) -> None:
    """SIGKILL what a test left running (never reached when the code under test works)."""
    for pid in pids:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
