"""Scoring a monitor against the labelled runs: lead time, late alerts, misses, false alarms.

On collapsing runs the lead time (onset − first alert step; ≥ 0 is in time), late alerts
(after the onset) and misses (no alert); on stable runs the false alarms (any alert).
Tuning picks, for each monitor alike, the subset of its replayed items that maximises
Youden's J on the tuning runs; the scores are reported on the other runs. The split is
fixed by a hash of the run's name (about half each, `in_tuning_set`), so a partial lab
already has both kinds of run on both sides.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.lab.replay import FirstAlerts
from bench.lab.summary import RunSummary


@dataclass
class Labelled:
    """A run of known outcome and the first alerts of every replayed monitor item."""

    key: str
    summary: RunSummary
    ours: FirstAlerts = field(default_factory=dict)
    rlwatch: FirstAlerts = field(default_factory=dict)
    live: FirstAlerts | None = None
    """Our first alerts as the live monitor stored them (a check of the replay)."""

    @property
    def onset(self) -> int | None:
        return self.summary.collapse_step

    @property
    def tuning(self) -> bool:
        return in_tuning_set(self.key)


def in_tuning_set(key: str) -> bool:
    """The fixed tuning/report split: even first byte of sha1(run name)."""
    return hashlib.sha1(key.encode()).digest()[0] % 2 == 0


@dataclass
class Score:
    """One monitor configuration's record on a set of labelled runs."""

    collapsing: int
    stable: int
    in_time: list[int]
    """Lead times (onset − first alert ≥ 0) of the collapses alerted in time."""
    late: int
    missed: int
    false_alarms: int

    def line(self, name: str) -> str:
        lead = (
            "-"
            if not self.in_time
            else f"{statistics.median(self.in_time):.0f} ({min(self.in_time)}-{max(self.in_time)})"
        )
        return (
            f"| {name} | {len(self.in_time)}/{self.collapsing} | {lead} | {self.late} | "
            f"{self.missed} | {self.false_alarms}/{self.stable} |"
        )


def first_of(first: FirstAlerts, items: Iterable[str] | None) -> int | None:
    steps = [s for k, s in first.items() if items is None or k in items]
    return min(steps) if steps else None


def score(runs: Sequence[Labelled], which: str, items: Iterable[str] | None = None) -> Score:
    """Score one monitor ('ours' or 'rlwatch') restricted to `items` (None: all, warning+)."""
    items = None if items is None else set(items)
    sc = Score(0, 0, [], 0, 0, 0)
    for run in runs:
        alert = first_of(getattr(run, which), items)
        if run.onset is None:
            sc.stable += 1
            sc.false_alarms += alert is not None
            continue
        sc.collapsing += 1
        if alert is None:
            sc.missed += 1
        elif alert <= run.onset:
            sc.in_time.append(run.onset - alert)
        else:
            sc.late += 1
    return sc


def tune(runs: Sequence[Labelled], which: str) -> list[str]:
    """Greedy forward selection of detector items maximising Youden's J: the share of
    collapses alerted in time minus the share of stable runs alarmed. Balanced, so an
    alarm that fires on every run scores 0 however many runs collapse."""
    candidates = sorted({k for r in runs for k in getattr(r, which)})
    chosen: list[str] = []

    def value(items: list[str]) -> tuple[float, int]:
        s = score(runs, which, items)
        hit = len(s.in_time) / s.collapsing if s.collapsing else 0.0
        fa = s.false_alarms / s.stable if s.stable else 0.0
        return hit - fa, -len(items)

    best = value(chosen)
    while True:
        trials = [(value([*chosen, c]), c) for c in candidates if c not in chosen]
        if not trials:
            break
        top, c = max(trials)
        if top <= best:
            break
        chosen.append(c)
        best = top
    return chosen
