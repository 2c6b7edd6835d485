"""What a stored run says about its health: the scores healthy.py judges, the intervals
its precursors were open, and the learning rate it was measurably healthy at.

Reads the store (a `RunReader`); the judgement itself is healthy.py's pure functions.
"""

from __future__ import annotations

import math

from monitor.detectors.config import SETUP_DETECTORS
from monitor.detectors.rules import SETTINGS
from monitor.remediation.healthy import Intervals, Scores, judge
from monitor.store.reader import RunReader
from monitor.store.records import Alert

SCORE_METRICS = ("eval/acc", "reward/mean")
"""The held-out accuracy, else (a run that logs no evaluation) the training reward."""


def scores(reader: RunReader) -> Scores:
    """(step, score) of every evaluation of the first of SCORE_METRICS the run logs."""
    for name in SCORE_METRICS:
        steps, values = reader.scalars(name)[name]
        if len(steps):
            return [(int(s), float(v)) for s, v in zip(steps, values, strict=True)]
    return []


def opened(alert: Alert, onset_margin: int) -> int:
    """Where an alert's episode began: `onset_margin` steps before a symptom's alert opened
    (its signal moved before its persistence was met), or earlier where the detector saw
    the move begin (`Alert.since`: an outcome's fall, often long before it is certain);
    a setting that moved is exact."""
    if alert.metric in SETTINGS:
        return alert.step
    margin = alert.step - onset_margin
    return margin if alert.since is None else min(margin, alert.since)


def is_precursor(severity: str, detector: str) -> bool:
    """An alert of this severity and detector is a warning or critical on the run's state.
    A setup rule's warning is not:
    it says how the run was configured from its first step, so a checkpoint taken under it
    can be healthy (the remedy is resuming from before the collapse with the setting
    fixed, which advice for a trainer that cannot be changed from outside relies on)."""
    return severity != "info" and detector not in SETUP_DETECTORS


def precursors(reader: RunReader, onset_margin: int) -> Intervals:
    """(opened, cleared or None) of every precursor alert (`is_precursor`, `opened`)."""
    return [
        (opened(a, onset_margin), a.cleared_step)
        for a in reader.alerts(min_severity="warning")
        if is_precursor(a.severity, a.detector)
    ]


def healthy_lr(reader: RunReader, onset_margin: int) -> float | None:
    """The highest learning rate the run was measured healthy *after*: what a lowered lr
    is measured from when no alert says what it was before it rose (a schedule that ramped
    it from the start past what the run could take). A too-high lr harms with a lag, so an
    evaluation vouches for the lr of the updates before the previous one: the lr logged up
    to the healthy evaluation before the last one (none is inside the episode under way:
    an open alert's interval has no end); up to the last one when no update came before
    the one before it."""
    run_scores = scores(reader)
    verdicts = judge([s for s, _ in run_scores], run_scores, precursors(reader, onset_margin))
    healthy = [v.step for v in verdicts if v.healthy]
    steps, values = reader.scalars("optim/lr")["optim/lr"]
    lrs = [(int(s), float(v)) for s, v in zip(steps, values, strict=True)]

    def highest_up_to(at: int) -> float | None:
        up_to = [v for s, v in lrs if s <= at and math.isfinite(v) and v > 0]
        return max(up_to) if up_to else None

    vouched = highest_up_to(healthy[-2]) if len(healthy) > 1 else None
    return vouched if vouched is not None or not healthy else highest_up_to(healthy[-1])
