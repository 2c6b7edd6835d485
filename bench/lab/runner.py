"""A resumable runner for many `minirl train` runs: the lab's batch executor.

Each run is a `minirl train` subprocess with its own run directory and log file. The
runner records every change in the lab's manifest (manifest.py), so that an interrupted
lab picks up where it stopped: finished runs are skipped, an interrupted run continues
from its last checkpoint with `--resume` (one without a checkpoint starts over), and a
run that crashed is retried a bounded number of times. One runner per lab directory (an OS file
lock); the children die with the runner (SIGINT, so they checkpoint first).

Concurrency is 1 by default: this machine has 2 cores, and each run already uses both.

What it deliberately does not do: decide which runs exist (settings.py and detection.py's
stress runs do), read the runs' metrics (report.py does), or schedule across machines.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from bench import REPO
from bench.lab.manifest import (
    Manifest,
    RunSpec,
    RunState,
    load_manifest,
    merge_specs,
    save_manifest,
)
from core.errors import UserError
from trainer.leftovers import pid_alive

LOCK = "runner.lock"


# ---------------------------------------------------------------------------- one run


def log_path(lab_dir: Path, key: str) -> Path:
    return Path(lab_dir) / "logs" / (key.replace("/", "__") + ".log")


def has_checkpoint(run_dir: Path) -> bool:
    folder = Path(run_dir) / "checkpoints"
    return folder.is_dir() and any(p.suffix == ".pt" for p in folder.iterdir())


def train_command(spec: RunSpec, resume: bool, python: str = sys.executable) -> list[str]:
    """The `minirl train` command line of a run (what the report prints as its recipe)."""
    cmd = [python, "-m", "app.cli", "train", spec.config]
    for override in spec.overrides:
        cmd += ["--set", override]
    cmd += ["--run-dir", spec.run_dir, "--quiet"]
    return [*cmd, "--resume"] if resume else cmd


def last_stop_reason(run_dir: Path) -> str | None:
    """The reason of the run's last `stop` event, None if it never stopped cleanly."""
    from monitor.store.reader import RunReader

    if not (Path(run_dir) / "store.sqlite").is_file():
        return None
    try:
        with RunReader(run_dir) as reader:
            stops = reader.events("stop")
    except UserError:
        return None
    return str(stops[-1].detail.get("reason")) if stops else None


def _die_with_parent() -> None:
    """Child side of Popen: SIGINT when the runner dies, so the trainer checkpoints."""
    with contextlib.suppress(OSError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def _pid_alive(pid: int | None) -> bool:
    if not pid or not pid_alive(pid):
        return False
    # a zombie or a recycled pid of another program does not count
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"app.cli" in cmdline


def _wait_for_stray(state: RunState, timeout_s: float = 120.0) -> None:
    """A child of a killed runner may still be checkpointing: let it finish first."""
    if not _pid_alive(state.pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pid, signal.SIGINT)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    while _pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _pid_alive(state.pid):
        raise UserError(f"a trainer (pid {state.pid}) from an earlier runner does not exit")


# ---------------------------------------------------------------------------- the runner


@contextlib.contextmanager
def lab_lock(lab_dir: Path) -> Iterator[None]:
    """Hold the lab's lock for the runner's lifetime (released by the OS if it dies)."""
    Path(lab_dir).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(lab_dir) / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another runner is working on {lab_dir} (see its status)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def lab_locked(lab_dir: Path) -> bool:
    """True while a runner holds the lab's lock."""
    path = Path(lab_dir) / LOCK
    if not path.is_file():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@dataclass
class _Child:
    key: str
    proc: subprocess.Popen
    started: float
    log: Any


def run_all(
    lab_dir: Path,
    specs: Sequence[RunSpec],
    *,
    jobs: int = 1,
    max_attempts: int = 3,
    python: str = sys.executable,
    say: Any = print,
    meta: dict[str, Any] | None = None,
) -> Manifest:
    """Run every spec that is not done yet, `jobs` at a time; returns the final manifest.

    Interrupting (Ctrl-C, SIGTERM) stops the children with SIGINT, so each writes a
    checkpoint, and leaves them pending for the next call.
    """
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: must be >= 1")
    lab_dir = Path(lab_dir)
    with lab_lock(lab_dir):
        manifest = merge_specs(load_manifest(lab_dir), specs)
        manifest.meta.update(meta or {})
        for key in [s.key for s in specs]:
            state = manifest.states[key]
            if state.status == "running":  # the runner that owned it was killed
                _wait_for_stray(state)
                state.status, state.pid = "pending", None
        save_manifest(lab_dir, manifest)
        todo = [s.key for s in specs if manifest.states[s.key].status == "pending"]
        done_before = sum(manifest.states[s.key].status == "done" for s in specs)
        say(f"lab {lab_dir}: {len(specs)} runs, {done_before} done, {len(todo)} to run")
        running: list[_Child] = []
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            while todo or running:
                while todo and len(running) < jobs:
                    running.append(
                        _start(lab_dir, manifest, manifest.specs[todo.pop(0)], python, say)
                    )
                    save_manifest(lab_dir, manifest)
                time.sleep(0.5)
                for child in [c for c in running if c.proc.poll() is not None]:
                    running.remove(child)
                    if _finish(lab_dir, manifest, child, max_attempts, say) == "retry":
                        todo.insert(0, child.key)
                    save_manifest(lab_dir, manifest)
        except KeyboardInterrupt:
            say(f"interrupted: stopping {len(running)} run(s) at a checkpoint")
            for child in running:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGINT)
            for child in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(timeout=180)
                state = manifest.states[child.key]
                state.status, state.pid = "pending", None
                state.seconds += time.monotonic() - child.started
                child.log.close()
            save_manifest(lab_dir, manifest)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
    return manifest


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _spawn(cmd: list[str], log: IO[str], note: str, cwd: Path, **popen: Any) -> subprocess.Popen:
    """Start `cmd` with stdout and stderr appended to `log`, after a line saying when and
    what (`note` goes after the time); no stdin."""
    log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')}{note}: {' '.join(cmd)}\n")
    log.flush()
    return subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, **popen
    )


def _start(lab_dir: Path, manifest: Manifest, spec: RunSpec, python: str, say: Any) -> _Child:
    state = manifest.states[spec.key]
    run_dir = Path(spec.run_dir)
    resume = (run_dir / "store.sqlite").is_file() and has_checkpoint(run_dir)
    if not resume and run_dir.exists():
        shutil.rmtree(run_dir)  # interrupted before its first checkpoint: start over
    cmd = train_command(spec, resume, python)
    log_file = log_path(lab_dir, spec.key)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log = log_file.open("a")
    proc = _spawn(cmd, log, f" attempt {state.attempts + 1}", REPO, preexec_fn=_die_with_parent)
    state.status, state.pid = "running", proc.pid
    state.attempts += 1
    say(f"{'resume' if resume else 'start '} {spec.key} (attempt {state.attempts}, pid {proc.pid})")
    return _Child(spec.key, proc, time.monotonic(), log)


def _finish(lab_dir: Path, manifest: Manifest, child: _Child, max_attempts: int, say: Any) -> str:
    """Record how a child ended; 'retry' if it should be resumed."""
    child.log.close()
    spec, state = manifest.specs[child.key], manifest.states[child.key]
    code = child.proc.returncode
    state.seconds += time.monotonic() - child.started
    state.returncode, state.pid = code, None
    state.stopped = last_stop_reason(Path(spec.run_dir))
    if code == 0 or state.stopped == "non-finite":  # a diverged run is a result, not a bug
        state.status, state.error = "done", None
        say(f"done   {child.key}: {state.stopped} ({state.seconds:.0f} s)")
        return "done"
    tail = _tail(log_path(lab_dir, child.key))
    if code == 2 or state.attempts >= max_attempts:  # 2: a user error, retrying cannot help
        state.status, state.error = "failed", tail
        say(f"FAILED {child.key} (exit {code}): {tail}")
        return "failed"
    state.status = "pending"
    say(f"retry  {child.key} (exit {code}): {tail}")
    return "retry"


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def status_table(lab_dir: Path) -> str:
    """One line per run: status, attempts, how it stopped, wall time."""
    manifest = load_manifest(Path(lab_dir))
    if not manifest.specs:
        return f"{lab_dir}: no runs recorded"
    counts: dict[str, int] = {}
    lines = []
    for key, state in manifest.states.items():
        counts[state.status] = counts.get(state.status, 0) + 1
        lines.append(
            f"  {key:<40} {state.status:<8} attempts {state.attempts}  "
            f"{state.stopped or '-':<12} {state.seconds / 60:6.1f} min"
        )
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    active = "a runner is active" if lab_locked(Path(lab_dir)) else "no runner active"
    return "\n".join([f"{lab_dir}: {summary} ({active})", *lines])


def detach(lab_dir: Path, bench_argv: list[str], status: str) -> int:
    """Start `minirl bench <bench_argv>` without --background in a new session (it
    survives the shell), logging to <lab_dir>/runner.log; `status` is the command that
    shows its progress."""
    if lab_locked(lab_dir):
        raise UserError(f"a runner is already working on {lab_dir}; see --status")
    lab_dir.mkdir(parents=True, exist_ok=True)
    log = lab_dir / "runner.log"
    rest = [a for a in bench_argv if a != "--background"]
    cmd = [sys.executable, "-m", "app.cli", "bench", *rest]
    with log.open("a") as fh:
        proc = _spawn(cmd, fh, "", Path.cwd(), start_new_session=True)
    print(f"running in the background (pid {proc.pid}); log {log}")
    print(f"progress: {status}")
    print(f"stop it with: kill -INT {proc.pid}   (runs stop at a checkpoint; rerun to resume)")
    return 0
