"""A stored run's stream replayed through the detectors it was monitored with: what
`minirl analyze` compares with the alerts stored live (the same `DetectorSet` that
`Monitor.log` runs), to say whether the stored alerts are the detectors' own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from monitor.config import MonitorConfig
from monitor.detectors import DetectorSet
from monitor.store.records import AlertDraft

DISAGREES = (
    "the detectors replayed on this run do not open the alerts stored live "
    "(a run monitored with other thresholds, or with steps dropped by a resume)"
)
UNREADABLE = "the run's monitor config could not be read: replayed with defaults"


def replay(
    series: dict[str, tuple[np.ndarray, np.ndarray]], live_config: Any
) -> tuple[list[dict[str, Any]], bool]:
    """(every warning or critical alert the detectors open on the stream, whether the
    run's stored `monitor` config was read): a config of another version, or none
    readable, replays with the defaults."""
    try:
        config = MonitorConfig.from_dict(live_config if isinstance(live_config, dict) else None)
        read = True
    except Exception:  # a config of another version: replay with the defaults, say so
        config, read = MonitorConfig(), False
    stream: dict[int, dict[str, float]] = {}
    for name, (s, v) in series.items():
        for step, value in zip(s.tolist(), v.tolist(), strict=True):
            stream.setdefault(step, {})[name] = value
    detectors = DetectorSet(config.detectors)
    replayed = []
    for step in sorted(stream):
        for change in detectors.update(step, stream[step]):
            if isinstance(change, AlertDraft) and change.severity != "info":
                replayed.append({"step": step, **dataclasses.asdict(change)})
    return replayed, read


def agrees(live: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> bool:
    """Whether the replay opens the same (step, detector) warnings and criticals."""
    stored = {(a["step"], a["detector"]) for a in live if a["severity"] != "info"}
    return stored == {(a["step"], a["detector"]) for a in replayed}
