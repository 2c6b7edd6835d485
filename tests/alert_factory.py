"""Alerts for tests of what consumes them (exporter, webhook, dashboard): plausible
defaults, and each test sets the fields it checks."""

from __future__ import annotations

from typing import Any

from monitor.store.records import Alert


def make_alert(**fields: Any) -> Alert:
    """A warning of the train-inference KL detector at step 3, with `fields` replaced."""
    alert = Alert(
        detector="train_inference_kl",
        severity="warning",
        metric="mismatch/kl_k1",
        value=0.05,
        baseline=1e-3,
        window=50,
        factor="train_inference",
        message="m",
        remedy="r",
        id=1,
        step=3,
    )
    return Alert(**{**vars(alert), **fields})
