"""`minirl watch` started before its source: wait for the path to appear, then follow it.

The natural order is watcher first, trainer second, so a source that does not exist yet
is waited for (one line says what for) instead of refused. Its format must be known
without reading it: `--format`, or what the path itself says (a `.jsonl`/`.log` file, a
name without a suffix meaning a TensorBoard log directory, an MLflow `sqlite:///` URI).
Ctrl-C or SIGTERM while waiting stops cleanly, with nothing stored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from monitor.watch.mlflow import PREFIX as MLFLOW_PREFIX

WHAT = {
    "tensorboard": "a TensorBoard log directory",
    "jsonl": "a JSONL log file",
    "console": "a console log file",
    "mlflow": "an MLflow tracking store",
    "wandb": "a W&B run",
}


def watched_path(source: str) -> Path:
    """The file or directory whose appearance starts the watch."""
    return Path(source[len(MLFLOW_PREFIX) :] if source.startswith(MLFLOW_PREFIX) else source)


def absent(source: str) -> bool:
    return not watched_path(source).exists()


@contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """An event set by Ctrl-C or SIGTERM (in the main thread), old handlers restored after."""
    stop = threading.Event()
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)


def wait_for(source: str, fmt: str, poll_s: float) -> bool:
    """Say once what is awaited and poll until `source` exists (True) or the user stops
    (False)."""
    with stop_on_signal() as stop:
        print(
            f"minirl watch: waiting for {source} ({WHAT[fmt]}) to appear; Ctrl-C to stop",
            flush=True,
        )
        while absent(source):
            if stop.wait(poll_s):
                return False
    return True
