"""The watch loop: poll a source, assemble whole steps, store them through `Monitor`.

Values arrive in the peer's names, per step, possibly a step spread over several polls
(TensorBoard and MLflow write one value per tag). A step is stored once it is whole:
at once for sources whose units are whole rows, else when a later step has appeared or
when a poll brought nothing new for it. Values for a step before the last stored one
(a trainer resumed from an older checkpoint re-logs those steps) are counted and
dropped: the store already holds them. More values for the last stored step merge.

Crash safety: each batch of steps is stored in one transaction together with the
source's read state and the values still pending (meta key `watch`), so a restarted
watcher continues exactly there: nothing stored is read again, nothing read is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.importers import MAX_EXAMPLES, Parsed
from monitor.importers.names import rename
from monitor.monitor import Monitor
from monitor.store.records import Alert
from monitor.watch.sources import Source

STATE_KEY = "watch"
"""Run store meta key of the source's read state and the pending values."""
SOURCE_KEY = "source"
"""Run store meta key saying what the run is a watch of (RunMeta.source)."""
BATCH_STEPS = 500
"""Steps per transaction when catching up on a backlog (the dashboard sees progress)."""


@dataclass
class Counts:
    """What the watcher did so far."""

    steps: int = 0
    """Steps stored."""
    values: int = 0
    alerts: int = 0
    """Alerts the detectors raised on the stored steps."""
    late: int = 0
    """Values of steps before the last stored one, dropped (already stored)."""
    garbage: int = 0
    """Units of the source (lines, records, events) that could not be read."""
    non_numeric: int = 0
    examples: list[str] = field(default_factory=list)
    """The first few garbage units, quoted (for the summary line)."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Peer metric names mapped onto ours (importers/names.py)."""


class Watcher:
    """Feeds one source into one Monitor; `poll()` once, or `run(stop)` until stopped."""

    def __init__(
        self,
        mon: Monitor,
        source: Source,
        pending: dict[int, dict[str, float]] | None = None,
        keep_names: bool = False,
        on_alert: Callable[[Alert], None] | None = None,
        names: Mapping[str, str] | None = None,
        settings: Mapping[str, float] | None = None,
    ) -> None:
        self.mon, self.source, self.keep_names = mon, source, keep_names
        self.names = dict(names or {})  # a user's `--map`, before the peers' names
        self.settings = dict(settings or {})
        """The run's fixed settings read off its config (`--verl-config`): logged with
        each new step, as the in-process adapters do, for the setup and setting rules."""
        self.pending: dict[int, dict[str, float]] = dict(pending or {})
        self.counts = Counts()
        self.on_alert = on_alert
        self._last: tuple[int | None, set[str]] = (None, set())

    def state(self) -> dict[str, Any]:
        pending = {str(step): row for step, row in sorted(self.pending.items())}
        return {"source": self.source.state(), "pending": pending, "names": self.names}

    def poll(self, final: bool = False) -> int:
        """Read what is new, store the steps that are whole; returns the steps stored."""
        parsed = self.source.poll(final)
        self._tally(parsed)
        for step, row in parsed.rows.items():
            self.pending.setdefault(step, {}).update(row)
        steps = sorted(self.pending)
        if steps and not (final or self.source.whole_rows) and steps[-1] in parsed.rows:
            steps.pop()  # the newest step may still be growing
        return self._store(steps)

    def drain(self) -> int:
        """Read everything there is now (a backlog may take several reads) and store it all."""
        stored = 0
        while True:
            before = self.counts.values + self.counts.garbage + self.counts.late
            stored += self.poll(final=True)
            if self.counts.values + self.counts.garbage + self.counts.late == before:
                return stored

    def run(self, stop: threading.Event, poll_s: float) -> None:
        """Poll every `poll_s` seconds until `stop` is set, then store what is left."""
        while not stop.is_set():
            self.poll()
            stop.wait(poll_s)
        self.drain()

    def _tally(self, parsed: Parsed) -> None:
        c = self.counts
        c.garbage += parsed.garbage
        c.non_numeric += parsed.non_numeric
        c.examples += parsed.examples[: max(0, MAX_EXAMPLES - len(c.examples))]

    def _held(self, step: int) -> set[str]:
        """Names already stored at `step`, the last stored step (read once, then tracked)."""
        if self._last[0] != step:
            rows = self.mon.store.recent_scalars(step)
            self._last = (step, set(rows[0][1]) if rows else set())
        return self._last[1]

    def _store(self, steps: list[int]) -> int:
        """Store `steps` from pending; a stored (step, name) is never written again."""
        stored = 0
        last = self.mon.last_step()
        for first in range(0, len(steps), BATCH_STEPS):
            alerts: list[Alert] = []
            with self.mon.store.transaction():
                for step in steps[first : first + BATCH_STEPS]:
                    row = self.pending.pop(step)
                    row = rename(row, self.counts.renamed, self.names, not self.keep_names)
                    if last is not None and step <= last:
                        held = self._held(last) if step == last else row.keys()
                        new = {name: v for name, v in row.items() if name not in held}
                        self.counts.late += len(row) - len(new)
                        if not new:
                            continue
                        row = new
                    fresh = last is None or step > last
                    alerts += self.mon.log(step, {**self.settings, **row} if fresh else row)
                    held = self._last[1] if self._last[0] == step else set()
                    self._last = (step, held | row.keys())
                    last, stored = step, stored + 1
                    self.counts.values += len(row)
                self.mon.store.set_meta(STATE_KEY, self.state())
            self.counts.alerts += len(alerts)
            for alert in alerts:
                if self.on_alert is not None:
                    self.on_alert(alert)
        self.counts.steps += stored
        return stored
