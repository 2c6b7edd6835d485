"""Detectors of approximation breakdown and collapse precursors, built from the config.

`build_detectors(DetectorsConfig)` returns one detector per enabled rule, named after
the config field, in the config's order. The protocol is in base.py.
"""

from __future__ import annotations

import dataclasses

from monitor.config import DetectorsConfig, DriftRule, DropRule, LevelRule, NonFiniteRule
from monitor.detectors.base import Detector
from monitor.detectors.drift import DriftDetector
from monitor.detectors.drop import DropDetector
from monitor.detectors.level import LevelDetector
from monitor.detectors.nonfinite import NonFiniteDetector

_BY_RULE: dict[type, type] = {
    LevelRule: LevelDetector,
    DriftRule: DriftDetector,
    DropRule: DropDetector,
    NonFiniteRule: NonFiniteDetector,
}


def build_detectors(config: DetectorsConfig) -> list[Detector]:
    """One detector per enabled rule of `config`."""
    out: list[Detector] = []
    for f in dataclasses.fields(config):
        rule = getattr(config, f.name)
        if rule.enabled:
            out.append(_BY_RULE[type(rule)](f.name, rule))
    return out


__all__ = [
    "Detector",
    "DriftDetector",
    "DropDetector",
    "LevelDetector",
    "NonFiniteDetector",
    "build_detectors",
]
