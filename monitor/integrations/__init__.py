"""Adapters that plug the monitor into other trainers in-process: a TRL / Hugging Face
`TrainerCallback` (trl.py) and a verl tracking backend (verl.py). Each imports its
trainer's package only when used, so the monitor's core install stays torch-free."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from core.controls import RunControls
from monitor.detectors.rules import CLIP_ON, LENGTH_NORM, MINI_BATCHES
from monitor.store.records import Alert

log = logging.getLogger("minirl.monitor")


def numeric_logs(logs: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a trainer's log dict: ints, floats, 0-d tensors and numpy scalars
    (through `.item()`); strings, lists and flags are dropped."""
    out = {}
    for name, value in logs.items():
        if not isinstance(value, int | float) and hasattr(value, "item"):
            try:
                value = value.item()
            except (TypeError, ValueError, RuntimeError):  # not a one-element array
                continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


def settings_of(controls: RunControls) -> dict[str, float]:
    """A trainer's fixed settings as the metrics minirl's trainer logs every step (policy
    updates per rollout, the clip mask, length normalisation), read from its config: the
    setup rules judge a run by them at its first step, and the setting rules watch them."""
    return {
        MINI_BATCHES: float(controls.mini_batches),
        CLIP_ON: float(controls.clip),
        LENGTH_NORM: float(controls.length_norm),
    }


def warn_alerts(alerts: Iterable[Alert]) -> None:
    """Each alert the monitor raised, as one warning in the trainer's own log."""
    for alert in alerts:
        log.warning(
            "minirl step %d: %s %s: %s", alert.step, alert.severity, alert.detector, alert.message
        )
