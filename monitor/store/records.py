"""The records of a run: alerts, remediation actions, events, run summaries.

Frozen dataclasses only, in the shape of prometheus/client_python's `samples.py`: the
store writes and reads them, detectors and the remediation policy produce them, the
dashboard and `analyze` display them. No behaviour lives here, and no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")  # ascending

# The factor of the IS weight w_t = ρ_t · r_t (MiniRL, arXiv 2512.01374 eq. 5) an alert blames:
# ρ_t = π_old/μ_old (train_inference), r_t = π_θ/π_old (staleness), the expert routing
# inside either (routing), the higher-order terms themselves (approximation), or, for
# collapse precursors, the optimiser (optimisation) and the outcome (reward, lengths).
Factor = Literal[
    "train_inference", "staleness", "routing", "optimisation", "outcome", "approximation"
]
FACTORS: tuple[Factor, ...] = (
    "train_inference",
    "staleness",
    "routing",
    "optimisation",
    "outcome",
    "approximation",
)

ActionStatus = Literal["pending", "applied", "rejected"]
ActionSource = Literal["policy", "dashboard", "user"]
RunStatus = Literal["live", "finished", "crashed"]


def severity_rank(severity: str) -> int:
    """0 for info, 1 for warning, 2 for critical (for comparisons and filters)."""
    return SEVERITIES.index(severity)  # type: ignore[arg-type]


@dataclass(frozen=True)
class AlertDraft:
    """What a detector reports at one step, before the store gives it an id."""

    detector: str
    severity: Severity
    metric: str
    value: float
    """The observed value that triggered (NaN/inf for the non-finite detector)."""
    baseline: float
    """The run's own reference level the value was compared with (NaN if none)."""
    window: int
    """How many past steps the baseline summarises (0 for absolute levels only)."""
    factor: Factor
    message: str
    """What happened, with the numbers."""
    remedy: str
    """The paper's recommended remedy, in words a user can act on."""
    since: int | None = None
    """The step the signal's move began, where the detector knows it (an outcome's fall
    began where its smoothed level last stood at its peak); None: not known."""


@dataclass(frozen=True)
class Cleared:
    """A detector's signal that its open alert on `metric` is over (hysteresis passed)."""

    detector: str
    metric: str


@dataclass(frozen=True)
class Alert(AlertDraft):
    """An alert as stored: a draft plus its id, step and lifetime."""

    id: int = 0
    step: int = 0
    time: float = 0.0
    """Unix time at which it was written."""
    cleared_step: int | None = None
    """Step at which the detector declared it over; None while it is still open."""


@dataclass(frozen=True)
class ActionDraft:
    """A remediation decision before it is stored: `kind` and `params` follow actions.py."""

    kind: str
    params: dict[str, Any]
    reason: str
    alert_id: int | None = None


@dataclass(frozen=True)
class Action:
    """A remediation action as stored, with its status and outcome (the audit trail)."""

    id: int
    kind: str
    params: dict[str, Any]
    reason: str
    source: ActionSource
    alert_id: int | None
    status: ActionStatus
    step: int | None
    """Last logged step when the action was created (it applies at the next boundary)."""
    time: float
    resolved_step: int | None = None
    resolved_time: float | None = None
    detail: str = ""
    """What the trainer said when it applied or rejected the action."""


@dataclass(frozen=True)
class Event:
    """A run event: start, resume, rollback, stop, checkpoint, crash, close, truncate..."""

    id: int
    step: int | None
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)
    time: float = 0.0


@dataclass(frozen=True)
class RunMeta:
    """Who a run is: its id, when it started, its resolved config and current controls."""

    path: str
    run_id: str
    created_at: float
    schema_version: int
    config: dict[str, Any]
    controls: dict[str, Any]
    source: dict[str, Any] | None = None
    """Where the steps came from when not from a trainer's Monitor: `minirl watch` stores
    {"kind": "watch", "format": ..., "path": ...}; None for a run logged in-process."""


@dataclass(frozen=True)
class RunSummary:
    """What a run is and how it ended, from its store alone: one line of `list_runs` (a
    run picker), and the part of a lab run's result that is not about its metrics.
    Or the reason the store cannot be read."""

    path: str
    run_id: str
    status: RunStatus | None
    last_step: int | None
    created_at: float | None
    last_write: float | None
    n_alerts: int = 0
    n_pending_actions: int = 0
    error: str | None = None
    """Set (and the other fields mostly None) when the store is corrupt or unreadable."""
    stopped: str | None = None
    """Why the run ended: the last `stop` event's reason (e.g. completed, non-finite), or
    `crash at step N: error` after a later crash; None while it runs."""
    first_alert: tuple[int, str] | None = None
    """(step, detector) of the first warning or critical alert."""
    first_collapse_alert: tuple[int, str] | None = None
    """The same among the detectors whose critical alerts mean collapse to the
    remediation policy (`RemediationConfig.collapse_detectors`)."""


@dataclass(frozen=True)
class Histograms:
    """Per-step histograms of one distribution, as fixed bins over [lo, hi].

    `counts[i]` has n_bins + 2 entries: underflow (< lo), the bins, overflow (≥ hi).
    Quantiles and moments are exact (computed on the raw values before binning).
    """

    name: str
    steps: Any  # np.ndarray [S] int64
    edges: Any  # np.ndarray [n_bins + 1] float64 (of the latest row; bins are fixed per name)
    counts: Any  # np.ndarray [S, n_bins + 2] int64
    n: Any  # np.ndarray [S] int64, finite values
    n_nonfinite: Any  # np.ndarray [S] int64
    mean: Any  # np.ndarray [S] float64
    std: Any
    min: Any
    max: Any
    quantiles: dict[str, Any]  # "p01".."p99" -> np.ndarray [S]
