"""`MonitorConfig`: every threshold and limit of the monitor, with its default and why.

A tree of frozen dataclasses, the only place where the monitor's defaults live: the run
store, the histogram bins, one rule per detector, the remediation limits. Built from a
(YAML) dict with `MonitorConfig.from_dict`, which rejects unknown keys and wrong types
and merges partial overrides onto the defaults (e.g. `{"detectors": {"train_inference_kl":
{"warn_level": 0.05}}}`). This module does not detect anything (detectors/) nor decide
remedies (remediation.py).

Levels come from what was measured on this machine (notes/SCIENCE.md: vLLM bf16 gives a
mismatch KL k1 ≈ 1e-3, fp8 weights ≈ 3.5e-3, fp4 ≈ 3e-2; routing flips 0.3 %-8 %) and
from the paper's recipes (TIS cap 5, ε_low 0.2, ε_high 0.27, IcePop band [0.5, 5]).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from monitor.records import Factor, Severity
from monitor.typed_config import from_data

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
        # log ρ, log r, log w: |log w| of 5-14 happens on isolated tokens (SCIENCE.md) and
        # lands in the under/overflow bins; exact p01/p99/min/max are stored beside
        HistogramSpec("*log*", -5.0, 5.0, 50),
        HistogramSpec("*len*", 0.0, 1024.0, 64),
        HistogramSpec("*", -5.0, 5.0, 50),
    )


# ---------------------------------------------------------------------------- detectors


@dataclass(frozen=True)
class LevelRule:
    """One metric checked against absolute levels and against the run's own baseline.

    The baseline is the median of log(max(value, floor)) over the last `window` healthy
    steps; the robust z-score is (log value − median) / max(1.4826·MAD, sigma_floor). A
    change alert needs |z| ≥ z_warn *and* a `min_fold` change, so a near-constant
    stream (MAD ≈ 0) does not alert on a 1 % wobble. Values seen while the alert is open
    do not enter the baseline.
    """

    metric: str
    factor: Factor
    direction: Literal["high", "low"]
    remedy: str
    """The paper's remedy, in words, copied into every alert of this rule."""
    warn_level: float | None = None
    """Absolute level (≥ for high, ≤ for low) that raises a warning; None disables."""
    crit_level: float | None = None
    """Absolute level that raises a critical alert; None disables."""
    z_warn: float | None = 6.0
    """Robust z (log scale) that raises a warning; None disables change detection."""
    z_crit: float | None = 10.0
    """Robust z that raises a critical alert."""
    min_fold: float = 2.0
    """A change alert also needs value ≥ min_fold·baseline (high) or ≤ baseline/min_fold (low)."""
    floor: float = 1e-8
    """Values below this are treated as this: changes beneath the noise floor are ignored."""
    sigma_floor: float = 0.05
    """Smallest baseline spread in log units (5 %), so z stays finite on flat streams."""
    window: int = 50
    """Steps in the rolling baseline."""
    warmup: int = 20
    """Baseline steps needed before change detection starts (levels apply from step one)."""
    persist: int = 1
    """Consecutive steps the condition must hold before the alert fires."""
    z_clear: float = 3.0
    """Hysteresis: an open change alert clears once |z| stays below this..."""
    level_clear_frac: float = 0.8
    """...and the value is back beyond warn_level·frac (high) or warn_level/frac (low)..."""
    clear_after: int = 3
    """...for this many consecutive steps."""
    cooldown: int = 20
    """Steps after clearing during which the rule does not fire again (escalation to
    critical while open is always reported)."""
    severity: Severity = "warning"
    """Severity of the lower tier (info for purely diagnostic rules)."""
    enabled: bool = True


@dataclass(frozen=True)
class DriftRule:
    """Slow creep of a metric above its level at the start of the run: CUSUM on z-scores.

    Reference = median/MAD of log(max(value, floor)) over the first `reference` steps.
    S_t = min(cap·h, max(0, S_{t−1} + min(z_t, z_clip) − k)); the alert fires when S_t ≥ h
    and the EWMA of the value is at least `min_fold` × the reference; it clears (and S
    resets) when S_t < h/4 or the EWMA is back under √min_fold × the reference. Single
    spikes are the LevelRule's job (z is clipped).
    """

    metric: str
    factor: Factor
    remedy: str
    reference: int = 30
    """Steps that define the reference level (the run's own baseline)."""
    k: float = 0.5
    """CUSUM allowance per step, in σ: shifts smaller than ~2k are ignored."""
    h: float = 12.0
    """CUSUM alarm threshold, in σ·steps (a 2σ shift fires after ~8 steps)."""
    z_clip: float = 4.0
    sigma_floor: float = 0.1
    floor: float = 1e-8
    ewma_alpha: float = 0.1
    min_fold: float = 1.5
    cap: float = 2.0
    """S is capped at cap·h, so that it forgets an old excursion."""
    cooldown: int = 50
    severity: Severity = "warning"
    enabled: bool = True


@dataclass(frozen=True)
class DropRule:
    """An outcome that falls from its peak: reward or held-out accuracy collapse.

    drop = (peak − ewma) / (peak − zero), peak = running max of the EWMA after warm-up.
    """

    metric: str
    remedy: str
    ewma_alpha: float = 0.1
    """Smoothing of the noisy per-step outcome (1.0 = none, for periodic evaluations)."""
    warmup: int = 20
    """Observations before the peak is tracked."""
    zero: float = 0.0
    """The outcome of a policy that learned nothing (0 for 0/1 rewards)."""
    min_peak_gain: float = 0.05
    """The peak must exceed `zero` by this much: no collapse from nothing."""
    warn_drop: float = 0.3
    crit_drop: float = 0.5
    clear_drop: float = 0.15
    """Hysteresis: the alert clears once the drop is back below this."""
    cooldown: int = 50
    enabled: bool = True


@dataclass(frozen=True)
class NonFiniteRule:
    """Any NaN or ±inf scalar. Open per metric until the metric is finite again."""

    critical_prefixes: tuple[str, ...] = ("optim/", "is/", "approx/", "policy/", "reward/")
    """Metrics under these prefixes are critical when non-finite; others are warnings."""
    enabled: bool = True


_R_IS = (
    "turn on token-level IS correction with truncation (TIS, cap 5) if it is off; if it is "
    "on, tighten the cap or mask tokens outside a band (MIS/IcePop [0.5, 5]); check the "
    "inference engine's precision and sampler (top-p/top-k/temperature) against training's"
)
_R_STALE = (
    "turn clipping on (ε_low 0.2, ε_high 0.27) or tighten ε; use fewer mini-batches per "
    "rollout (less off-policy); for MoE add routing replay"
)
_R_ROUTING = (
    "use routing replay: R2 at ≤ 2 mini-batches per rollout, R3 at ≥ 4; on-policy, "
    "R3 brings no gain (arXiv 2512.01374)"
)
_R_APPROX = (
    "the first-order approximation is failing: turn off length normalisation, keep IS "
    "correction and clipping on, and reduce off-policy updates (fewer mini-batches)"
)
_R_COLLAPSE = (
    "roll back to the last healthy checkpoint, lower the learning rate (×0.5) and apply the "
    "fix for the factor that broke first (IS correction, clipping, routing replay)"
)


@dataclass(frozen=True)
class DetectorsConfig:
    """One rule per detector; the field name is the detector's name in alerts."""

    # --- approximation breakdown: train-inference factor ρ_t = π_old/μ_old
    train_inference_kl: LevelRule = LevelRule(
        "mismatch/kl_k1", "train_inference", "high", _R_IS, 2e-2, 1e-1, floor=1e-5
    )
    """KL(μ_old‖π_old), the paper's mismatch metric: bf16 ≈ 1e-3, fp4 weights ≈ 3e-2."""
    train_inference_kl_drift: DriftRule = DriftRule(
        "mismatch/kl_k1", "train_inference", _R_IS, floor=1e-5
    )
    """Mismatch KL creeping up over the run: the feedback loop the paper warns about."""
    train_inference_ratio_p99: LevelRule = LevelRule(
        "mismatch/ratio_p99", "train_inference", "high", _R_IS, 2.0, 5.0, z_warn=None
    )
    """Upper tail of ρ_t: 1 % of tokens weighted ≥ 2× (warning) or ≥ 5× (the TIS cap)."""
    train_inference_ratio_p01: LevelRule = LevelRule(
        "mismatch/ratio_p01", "train_inference", "low", _R_IS, 0.5, 0.2, z_warn=None
    )
    """Lower tail of ρ_t: tokens the trainer finds far less likely than the sampler did."""
    train_inference_ratio_max: LevelRule = LevelRule(
        "mismatch/ratio_max",
        "train_inference",
        "high",
        _R_IS,
        z_warn=8.0,
        z_crit=None,
        min_fold=10.0,
        severity="info",
    )
    """Max ρ_t: isolated tokens reach e^5-e^14 in every mode, so only jumps, as info."""
    train_inference_chi2: LevelRule = LevelRule(
        "mismatch/chi2_token", "train_inference", "high", _R_IS, 0.5, 2.0, floor=1e-4
    )
    """χ² of token weights, E[(ρ−1)²]: the variance the IS correction pays."""
    train_inference_chi2_seq: LevelRule = LevelRule(
        "mismatch/chi2_seq", "train_inference", "high", _R_IS, floor=1e-3
    )
    """χ² of sequence weights: grows with length, so change against baseline only."""
    train_inference_ess: LevelRule = LevelRule(
        "mismatch/ess", "train_inference", "low", _R_IS, 0.7, 0.3, min_fold=1.5
    )
    """Normalised effective sample size (Σw)²/(n·Σw²) in (0, 1]; low = few tokens dominate."""
    # --- staleness factor r_t = π_θ/π_old
    staleness_kl: LevelRule = LevelRule(
        "staleness/kl_k3", "staleness", "high", _R_STALE, 1e-2, 5e-2, floor=1e-4
    )
    """KL between π_θ and π_old over the mini-batches: 0 on-policy."""
    staleness_mask_frac: LevelRule = LevelRule(
        "staleness/mask_frac", "staleness", "high", _R_STALE, 0.1, 0.3, floor=1e-3
    )
    """Share of tokens masked by MiniRL's clipping rule (M_t = 0)."""
    # --- routing (MoE): the expert sets inside either factor
    routing_train_infer: LevelRule = LevelRule(
        "routing/mismatch_train_infer", "routing", "high", _R_ROUTING, 0.05, 0.15, floor=1e-3
    )
    """Share of (token, layer) top-k sets that differ, e^π_old vs e^μ_old (fp4: 3-8 %)."""
    routing_stale: LevelRule = LevelRule(
        "routing/mismatch_stale", "routing", "high", _R_ROUTING, 0.05, 0.15, floor=1e-3
    )
    """The same between e^π_θ and e^π_old across mini-batches (off-policy only)."""
    # --- the approximation itself
    approx_residual: LevelRule = LevelRule(
        "approx/seq_residual", "approximation", "high", _R_APPROX, 0.2, 1.0, floor=1e-3
    )
    """|Π w − (1 + Σ(w − 1))|: the higher-order terms the token surrogate drops."""
    # --- collapse precursors
    entropy_collapse: LevelRule = LevelRule(
        "policy/entropy",
        "optimisation",
        "low",
        _R_COLLAPSE,
        z_warn=5.0,
        z_crit=8.0,
        persist=2,
        floor=1e-4,
    )
    """Entropy falling to half its recent level or less (the paper's no-IS collapse)."""
    entropy_blowup: LevelRule = LevelRule(
        "policy/entropy", "optimisation", "high", _R_COLLAPSE, persist=2, floor=1e-4
    )
    """Entropy doubling: the policy dissolving into noise."""
    grad_norm_spike: LevelRule = LevelRule(
        "optim/grad_norm", "optimisation", "high", _R_COLLAPSE, min_fold=3.0
    )
    """Gradient norm ≥ 3× its recent median and far outside its spread."""
    length_blowup: LevelRule = LevelRule(
        "response/len_mean", "outcome", "high", _R_COLLAPSE, min_fold=1.5, persist=2, floor=1.0
    )
    """Mean response length growing ≥ 1.5× its recent level (runaway generations)."""
    truncation: LevelRule = LevelRule(
        "response/trunc_frac", "outcome", "high", _R_COLLAPSE, 0.2, 0.5, z_warn=None
    )
    """Share of responses cut at max_new_tokens."""
    reward_collapse: DropRule = DropRule("reward/mean", _R_COLLAPSE)
    """Smoothed training reward falling from its peak."""
    eval_collapse: DropRule = DropRule("eval/acc", _R_COLLAPSE, ewma_alpha=0.5, warmup=3)
    """Held-out accuracy falling from its peak (periodic, lightly smoothed)."""
    nonfinite: NonFiniteRule = NonFiniteRule()
    """NaN/inf in any scalar (loss, gradients, weights...)."""


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
    cooldown_steps: int = 50
    """Steps between two automatic actions of the same kind."""
    tis_cap: float = 5.0
    """Cap of the token TIS turned on by the policy (the paper's C = 5)."""
    cap_factor: float = 0.5
    """Tightening the cap multiplies it by this..."""
    min_cap: float = 2.0
    """...down to this; below it the policy switches to band masking (IcePop)."""
    icepop_band: tuple[float, float] = (0.5, 5.0)
    eps_low: float = 0.2
    eps_high: float = 0.27
    lr_factor: float = 0.5
    """The learning-rate scale applied after a collapse rollback."""
    collapse_detectors: tuple[str, ...] = (
        "reward_collapse",
        "eval_collapse",
        "entropy_collapse",
        "entropy_blowup",
        "grad_norm_spike",
        "length_blowup",
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
    detectors: DetectorsConfig = DetectorsConfig()
    remediation: RemediationConfig = RemediationConfig()
    resume_replay_steps: int = 200
    """On resume or truncation, the last steps replayed through fresh detectors to
    rebuild their baselines (a drift reference is re-learned from these steps)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> MonitorConfig:
        """Defaults overridden by `data` (merged key by key, so a partial rule keeps its
        other fields); unknown keys and wrong types raise UserError naming the key."""
        return from_data(cls, data, "monitor")
