"""Prometheus alerting rules equivalent to the monitor's threshold detectors.

Built from a `MonitorConfig` (the defaults unless told otherwise), so the levels in the
YAML are the detectors' own and cannot drift from them. Three kinds of rule:
- one per `LevelRule` (an absolute level, info unless the rule says): the same comparison
  the detector makes (≥ for "high", ≤ for "low"), on `minirl_metric{name=...}`.
- `MinirlNonFiniteMetric`: any NaN or ±inf scalar, critical under the detector's
  critical prefixes (the `nonfinite` rule).
- `MinirlMonitorAlert`: any alert the monitor itself holds open (`minirl_alert_open`),
  with its detector, metric, severity and factor labels. The baseline-relative parts of
  the detectors (robust z against the run's own baseline, drop from peak, the joint
  breakdown rule) count in steps over
  the run's own history, which PromQL's wall-clock windows cannot reproduce; this rule
  forwards them exactly instead of approximating them.

Deliberately not here: `persist` and hysteresis, which are counted in steps (Prometheus
rules count time; add `for:` to taste), and Alertmanager routing.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from monitor.alerting.prometheus import ALERT_OPEN, METRIC
from monitor.config import MonitorConfig
from monitor.detectors.rules import LevelRule

GROUP = "minirl"
_R_NONFINITE = "roll back to the last healthy checkpoint and lower the learning rate"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _num(value: float) -> str:
    return repr(float(value))


def _level_rule(detector: str, rule: LevelRule) -> dict[str, Any]:
    op = ">=" if rule.direction == "high" else "<="
    word = "above" if rule.direction == "high" else "below"
    return {
        "alert": f"Minirl{_camel(detector)}",
        "expr": f'{METRIC}{{name="{rule.metric}"}} {op} {_num(rule.level)}',
        "labels": {
            "severity": rule.severity,
            "detector": detector,
            "factor": rule.factor,
            "metric": rule.metric,
        },
        "annotations": {
            "summary": (
                f"{rule.metric} = {{{{ $value }}}} on run {{{{ $labels.run }}}}, "
                f"{word} the {rule.severity} level {rule.level:g}"
            ),
            "remedy": rule.remedy,
        },
    }


def _nonfinite_rules(prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    # NaN is the only value not equal to itself; each branch keeps the sample's own value.
    bad = f"({METRIC} != {METRIC} or {METRIC} == +Inf or {METRIC} == -Inf)"
    # A regex inside a PromQL double-quoted string: escape for the regex, then for the string.
    regex = "|".join(re.escape(p).replace("\\", "\\\\") + ".*" for p in prefixes)
    rules = []
    for severity, matcher in (("critical", "=~"), ("warning", "!~")):
        selector = f'{METRIC}{{name{matcher}"{regex}"}}'
        expr = f"{bad} and {selector}" if prefixes else bad
        if not prefixes and severity == "critical":
            continue
        rules.append(
            {
                "alert": "MinirlNonFiniteMetric" + ("Critical" if severity == "critical" else ""),
                "expr": expr,
                "labels": {"severity": severity, "detector": "nonfinite", "factor": "optimisation"},
                "annotations": {
                    "summary": "{{ $labels.name }} is {{ $value }} on run {{ $labels.run }}",
                    "remedy": _R_NONFINITE,
                },
            }
        )
    return rules


def build_rules(config: MonitorConfig | None = None) -> dict[str, Any]:
    """The rule file, as a dict ready for YAML (`groups: [{name, rules}]`)."""
    config = config or MonitorConfig()
    rules: list[dict[str, Any]] = []
    for field in dataclasses.fields(config.detectors):
        rule = getattr(config.detectors, field.name)
        if isinstance(rule, LevelRule) and rule.enabled:
            rules.append(_level_rule(field.name, rule))
    if config.detectors.nonfinite.enabled:
        rules += _nonfinite_rules(config.detectors.nonfinite.critical_prefixes)
    rules.append(
        {
            "alert": "MinirlMonitorAlert",
            "expr": f"{ALERT_OPEN} > 0",
            "annotations": {
                "summary": (
                    "monitor alert {{ $labels.detector }} ({{ $labels.severity }}) on "
                    "{{ $labels.metric }}, run {{ $labels.run }}; factor {{ $labels.factor }}"
                ),
            },
        }
    )
    return {"groups": [{"name": GROUP, "rules": rules}]}


def rules_yaml(config: MonitorConfig | None = None) -> str:
    """The rule file as YAML text that `promtool check rules` accepts."""
    import yaml

    return yaml.safe_dump(build_rules(config), sort_keys=False, allow_unicode=True, width=1000)
