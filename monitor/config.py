"""`MonitorConfig`: every threshold and limit of the monitor, with its default and why.

A tree of frozen dataclasses, the only place where the monitor's defaults live: the run
store, the histogram bins, the detectors' rules (monitor/detectors/config.py, with their
own rationale), the remediation limits. Built from a (YAML) dict with
`MonitorConfig.from_dict`, which rejects unknown keys and wrong types and merges partial
overrides onto the defaults (e.g. `{"detectors": {"grad_norm": {"z": 8}}}`). This module
does not detect anything (detectors/) nor decide remedies (remediation.py). The recipe
constants are the paper's (TIS cap 5, ε_low 0.2, ε_high 0.27, IcePop band [0.5, 5]).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from core.typed_config import from_data
from core.vocabulary import EPS_HIGH, EPS_LOW, ICEPOP_BAND, TIS_CAP
from monitor.detectors.config import DetectorsConfig
from monitor.store.records import Severity

# ---------------------------------------------------------------------------- store


@dataclass(frozen=True)
class StoreConfig:
    """How the SQLite run store is opened."""

    busy_timeout_s: float = 10.0
    """How long a writer or reader waits for a lock before giving up (WAL makes readers
    and the one writer independent; the wait only matters for a dashboard request)."""
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    """SQLite `synchronous` in WAL mode. NORMAL survives a killed process (the WAL is in
    the OS cache); only a power cut can lose the last steps. FULL fsyncs every step."""
    stale_after_s: float = 120.0
    """A run with no terminal event and no write for this long is reported as crashed."""


@dataclass(frozen=True)
class HistogramSpec:
    """Fixed bins for the distributions whose name matches `pattern` (fnmatch)."""

    pattern: str
    lo: float
    hi: float
    bins: int


def _default_histograms() -> tuple[HistogramSpec, ...]:
    return (
        # per-token entropy in nats: 0 .. ln(22k) ≈ 10 covers vocabularies up to ~22k tokens
        HistogramSpec("*entropy*", 0.0, 10.0, 50),
        # log ρ, log r, log w: isolated tokens with a far larger |log w| happen in every
        # mode and land in the under/overflow bins; exact p01/p99/min/max are stored beside
        HistogramSpec("*log*", -5.0, 5.0, 50),
        HistogramSpec("*len*", 0.0, 1024.0, 64),
        HistogramSpec("*", -5.0, 5.0, 50),
    )


# ---------------------------------------------------------------------------- remediation


@dataclass(frozen=True)
class RemediationConfig:
    """Limits and recipe constants of the automatic remediation policy."""

    min_severity: Severity = "warning"
    """Alerts below this severity never trigger an action."""
    max_attempts: int = 3
    """Automatic actions of one kind per run, at most."""
    max_rollbacks: int = 2
    """Automatic rollbacks per run, at most (a run that keeps collapsing needs a human)."""
    cooldown_steps: int = 15
    """Steps between two automatic actions of the same kind (a fix that did not hold is
    escalated by the next breakdown after this many steps; a breakdown raised within
    them, after the last rollback was applied, is decided when they have passed if its
    alert is still open)."""
    tis_cap: float = TIS_CAP
    """Cap of the token TIS turned on by the policy (the paper's C = 5)."""
    cap_factor: float = 0.5
    """Tightening the cap multiplies it by this..."""
    min_cap: float = 2.0
    """...down to this; below it the policy switches to band masking (IcePop)."""
    icepop_band: tuple[float, float] = ICEPOP_BAND
    """The band [α, β] of IcePop when the policy switches to band masking."""
    eps_low: float = EPS_LOW
    """ε_low of the clipping the policy turns on."""
    eps_high: float = EPS_HIGH
    """ε_high of the clipping the policy turns on."""
    lr_factor: float = 0.5
    """A breakdown blamed on the optimisation caps the lr at this × its pre-episode value."""
    r3_mini_batches: int = 4
    """An MoE run with at least this many mini-batches per rollout (a high off-policy
    degree) gets routing replay R3 at a breakdown, whatever factor is blamed."""
    onset_margin: int = 5
    """A precursor alert opens a few steps after its signal started moving (persistence):
    the healthy checkpoint of an episode is taken at least this many steps before it (a
    setting's alert, which is exact, opens at the step the setting moved: no margin)."""
    collapse_detectors: tuple[str, ...] = (
        "breakdown",
        "reward_collapse",
        "eval_collapse",
        "nonfinite",
    )
    """Critical alerts of these detectors mean collapse: rollback + lower lr + fix."""


# ---------------------------------------------------------------------------- root


@dataclass(frozen=True)
class MonitorConfig:
    """The monitor's whole configuration; `MonitorConfig()` is the documented default."""

    store: StoreConfig = StoreConfig()
    histograms: tuple[HistogramSpec, ...] = field(default_factory=_default_histograms)
    """Bins per distribution family, first match wins; the last entry should be `*`."""
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    remediation: RemediationConfig = RemediationConfig()
    resume_replay_steps: int = 200
    """On resume or truncation, the last steps replayed through fresh detectors to
    rebuild their baselines (a drift reference is re-learned from these steps)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> MonitorConfig:
        """Defaults overridden by `data` (merged key by key, so a partial rule keeps its
        other fields); unknown keys and wrong types raise UserError naming the key."""
        return from_data(cls, data, "monitor")
