"""A one-line terminal progress bar: step, reward, held-out accuracy, mismatch KL, ETA.

The KL shown is k3 (`mismatch/kl_k3` = E[ρ − 1 − log ρ] ≥ 0): k1, the unbiased estimator,
can be negative on one batch, which reads like a bug on a progress bar.

Rewrites its line in place on a terminal and prints one line per update otherwise (logs
stay readable). A disabled bar is a no-op object, not scattered `if`s.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class Progress:
    """Progress of steps first..last; `update` after each step with its scalars."""

    def __init__(self, first: int, last: int, stream: TextIO | None = None) -> None:
        self.first, self.last = first, last
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.monotonic()
        self.eval_acc: float | None = None

    def update(self, step: int, scalars: dict[str, float], note: str = "") -> None:
        if "eval/acc" in scalars:
            self.eval_acc = scalars["eval/acc"]
        done = step - self.first + 1
        total = self.last - self.first + 1
        elapsed = time.monotonic() - self.t0
        eta = elapsed / max(done, 1) * (total - done)
        width = 20
        filled = int(width * done / max(total, 1))
        parts = [
            f"step {step}/{self.last} [{'#' * filled}{'.' * (width - filled)}]",
            f"reward {scalars.get('reward/mean', float('nan')):.3f}",
            f"eval {self.eval_acc:.3f}" if self.eval_acc is not None else "eval -",
            f"kl3 {scalars.get('mismatch/kl_k3', float('nan')):.1e}",
            f"{scalars.get('perf/step_s', float('nan')):.2f}s/step",
            f"ETA {_duration(eta)}",
        ]
        line = " | ".join(parts) + (f" | {note}" if note else "")
        if self.tty:
            self.stream.write("\r\033[K" + line)
            if step >= self.last:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def extend(self, steps: int) -> None:
        """The run ends `steps` later (a rollback whose undone steps are trained again)."""
        self.last += steps

    def message(self, text: str) -> None:
        """A line of its own (an alert, an applied action) that the bar does not overwrite."""
        self.stream.write(("\r\033[K" if self.tty else "") + text + "\n")
        self.stream.flush()


class NoProgress(Progress):
    def __init__(self) -> None:
        pass

    def update(self, step: int, scalars: dict[str, float], note: str = "") -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def extend(self, steps: int) -> None:
        pass
