"""Scoring a monitor's alerts against the labelled runs, by the definitions users need.

On a collapsing run, with onset t₀ and the monitor's first warning or critical alert t₁:
lead = t₀ − t₁; *caught* when lead ≥ LEAD_GOAL (10 steps: time to act), *late* when
alerted with a smaller lead (or after the onset), *missed* when never alerted. The blamed
factor is the factor of the first critical alert before the onset, else of the warnings
before it in the breakdown rule's order (`blame_rank`: a setting, an IS factor, the
residual, the optimisation's symptoms); *correct* when it is the induced cause (lab
incident runs). On a stable run: whether any critical alert fired (a false page), and how
many warnings opened, per 100 steps over all stable runs and the healthy stretch of every
incident run before its incident (alerts there are false alarms, and never count as an
early detection). Runs whose incident did not end in a collapse (`survived`) are counted
apart: alerts after their incident are neither hits nor false alarms.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from bench.detection.corpus import Run
from bench.detection.monitors import Fired
from monitor.detectors.breakdown import blame_rank
from monitor.detectors.config import DetectorsConfig

LEAD_GOAL = 10
"""Alerted at least this many steps before the onset counts as caught (issue 13)."""
MEDIAN_LEAD_GOAL = 20


@dataclass
class RunScore:
    run: str
    split: str
    label: str
    onset: int | None
    first_alert: int | None
    first_detector: str | None
    lead: int | None
    blamed: str | None
    cause: str | None
    criticals: int
    warnings: int
    steps: int
    healthy_steps: int = 0
    """Steps of a stable run, or of an incident run before its incident (0 for a collapse
    without a known incident): where any alert is a false alarm."""
    healthy_warnings: int = 0
    """Warnings on those steps."""
    healthy_criticals: int = 0


def score_run(run: Run, fired: list[Fired]) -> RunScore:
    # the healthy stretch, where any alert is a false alarm: an incident run's steps before
    # its incident, a stable run's every step; a collapse without a known incident (a
    # public log) has none (its alerts before the onset are early detections)
    if run.incident_step is not None:
        healthy = [f for f in fired if f.step < run.incident_step]
        fired = [f for f in fired if f.step >= run.incident_step]
        healthy_steps = sum(step < run.incident_step for step, _ in run.stream)
    elif run.label == "stable":
        healthy, healthy_steps = fired, run.steps
    else:
        healthy, healthy_steps = [], 0
    limit = run.onset if run.onset is not None else 10**9
    first = fired[0] if fired else None
    crit = next((f for f in fired if f.severity == "critical" and f.step <= limit), None)
    before = [f for f in fired if f.step <= limit]
    causes = DetectorsConfig().breakdown.causes
    blame_from = crit or min(
        before, key=lambda f: (blame_rank(f.metric, f.factor, causes), f.step), default=None
    )
    return RunScore(
        run=run.name,
        split=run.split,
        label=run.label,
        onset=run.onset,
        first_alert=first.step if first else None,
        first_detector=first.detector if first else None,
        lead=(run.onset - first.step) if first and run.onset is not None else None,
        blamed=blame_from.factor if blame_from else None,
        cause=run.cause,
        criticals=sum(f.severity == "critical" for f in fired),
        warnings=sum(f.severity == "warning" for f in fired),
        steps=run.steps,
        healthy_steps=healthy_steps,
        healthy_warnings=sum(f.severity == "warning" for f in healthy),
        healthy_criticals=sum(f.severity == "critical" for f in healthy),
    )


@dataclass
class Summary:
    """What issue 13 asks per monitor and split (also the JSON object of results).

    Attributes:
        caught: collapses alerted at least LEAD_GOAL steps before their onset; `late`
            were alerted with a smaller lead or after the onset, `missed` never.
        leads: onset − first alert of the collapses alerted before their onset, sorted.
        false_critical: stable runs with any critical alert (a false page).
        stable_steps: steps of stable runs plus the healthy stretches of incident runs
            (before their incident), over which `warnings_per_100_steps` is counted.
        criticals_before_incident: incident runs with a critical alert before their
            incident (a false page).
        blame_known: collapses of a known, induced cause (lab incidents), of which
            `blame_correct` blame the induced cause.
        survived: incident runs that did not collapse (neither hits nor false alarms after
            the incident); `survived_alerted` of them were alerted after it.
    """

    collapses: int = 0
    caught: int = 0
    late: int = 0
    missed: int = 0
    leads: list[int] = field(default_factory=list)
    median_lead: float | None = None
    stable: int = 0
    false_critical: int = 0
    stable_steps: int = 0
    warnings_per_100_steps: float | None = None
    criticals_before_incident: int = 0
    blame_known: int = 0
    blame_correct: int = 0
    survived: int = 0
    survived_alerted: int = 0

    def as_json(self) -> dict:
        return asdict(self)


def summarise(scores: list[RunScore]) -> Summary:
    s = Summary()
    warnings = 0
    for r in scores:
        if r.label == "collapse":
            s.collapses += 1
            if r.first_alert is None:
                s.missed += 1
            elif r.lead is not None and r.lead >= LEAD_GOAL:
                s.caught += 1
            else:
                s.late += 1
            if r.lead is not None and r.lead >= 0:
                s.leads.append(r.lead)
            if r.cause is not None:
                s.blame_known += 1
                s.blame_correct += r.blamed == r.cause
        elif r.label == "stable":
            s.stable += 1
            s.false_critical += r.criticals > 0
        else:
            s.survived += 1
            s.survived_alerted += r.first_alert is not None
        s.stable_steps += r.healthy_steps
        warnings += r.healthy_warnings
        if r.label != "stable":  # a critical on the healthy stretch before an incident
            s.criticals_before_incident += r.healthy_criticals > 0
    s.leads.sort()
    s.median_lead = statistics.median(s.leads) if s.leads else None
    if s.stable_steps:
        s.warnings_per_100_steps = 100.0 * warnings / s.stable_steps
    return s
