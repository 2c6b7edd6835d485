"""The detectors' rules and their defaults: what is watched, in which direction, how hard.

Severities mean something (they are what a user sees and what remediation acts on):

- `info` (`LevelRule`): a level worth showing, e.g. a large training-inference mismatch;
  never paged, never acted on (a mismatch large since step 1 is a setting of the run).
- `warning` (`ChangeRule`): a precursor. A factor of the IS weight w_t = ρ_t·r_t
  (training-inference ρ, staleness r, routing, the first-order residual) or an
  optimisation signal moved against the run's *own* baseline, in the direction that
  precedes collapses, and stayed there. A setting that moved (`SETTINGS`) is a precursor
  too, and the cause of what follows; being exact, it warns the step it moves. Absolute
  levels warn only where the theory gives them a meaning (tokens past the IS cap).
- `critical`: a breakdown under way: joint evidence (`BreakdownRule`), the outcome
  falling hard (`DropRule`), or non-finite values (`NonFiniteRule`).

The defaults were chosen once on a tuning set of runs and frozen (bench/results/detection.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from monitor.detectors.remedies import R_APPROX, R_COLLAPSE, R_IS, R_OPTIM, R_ROUTING, R_STALE
from monitor.detectors.signatures import KeptMassRule, PrecisionRule, ReplayLeakRule, TwinRule
from monitor.store.records import Factor, Severity

Scale = Literal["log", "linear"]

ROLLOUT_BITS = "engine/rollout_bits"
"""Bits of a rollout weight (16 for bf16, 8 for FP8, 4 for FP4), logged by the trainer."""
MINI_BATCHES = "staleness/mini_batches"
"""Policy updates per rollout (the off-policy degree), logged by the trainer."""
CLIP_ON = "staleness/clip_on"
"""1 while the clip rule's mask M_t can act (the trust region is on), 0 once it is off."""
SETTINGS = ("optim/lr", MINI_BATCHES, ROLLOUT_BITS, CLIP_ON)
"""Settings of the run rather than symptoms (the lr, the policy updates per rollout, the
rollout weights' bits, clipping on): one that moved is the cause of what follows it."""


# ---------------------------------------------------------------------------- rule types
@dataclass(frozen=True)
class LevelRule:
    """An absolute level: `metric` ≥ `level` (high) or ≤ `level` (low) for `persist` steps.

    Info by default (a level worth showing). Clears once the value is back beyond
    level·clear_frac (high) or level/clear_frac (low) for `clear_after` steps.
    """

    metric: str
    """The canonical metric name the rule watches."""
    factor: Factor
    """The factor an alert of this rule is blamed on (IS decomposition or optimisation)."""
    direction: Literal["high", "low"]
    """high: alert at or above `level`; low: at or below it."""
    level: float
    remedy: str
    """The advice the alert carries (what a person would change)."""
    severity: Severity = "info"
    """info shows a level; warning makes it a precursor."""
    persist: int = 3
    clear_frac: float = 0.8
    """The alert clears beyond level·clear_frac (high) or level/clear_frac (low)."""
    clear_after: int = 5
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class ChangeRule:
    """A move against the run's own baseline: the precursor test (warning).

    Values are read on `scale` (log: log(max(x, floor)), for positive quantities that
    vary over decades; linear: x). The baseline at step t is the median and MAD of the
    values of the `window` logged points before the last `gap` ones, counting only
    points logged after `warmup` (the first steps of RL move a lot by design), whose own
    score was below `admit_z` (a rise building up below the threshold is not absorbed)
    and that came while no alert of this rule was open. With at least `min_baseline` such
    points, the recent level is the median of the last `recent` values, and its score is

        z = sign · (recent − median) / max(1.4826·MAD, sigma_floor),

    sign = +1 for `up`, −1 for `down`. The rule holds when z ≥ `z` and the move is at
    least `min_change` (log scale: a factor e.g. 2 = doubled/halved; linear: an absolute
    difference); it fires after holding for `persist` consecutive points, and clears after
    `clear_after` points with z < `z_clear`. `cooldown` points pass before it refires.
    `warmup`, `min_baseline` and `gap` count steps: a run logged every k steps reaches them
    in 1/k as many points (at least 5 in the baseline), not k times later.
    """

    metric: str
    """The canonical metric name the rule watches."""
    factor: Factor
    """The factor an alert of this rule is blamed on (IS decomposition or optimisation)."""
    direction: Literal["up", "down"]
    """up: a rise is the move that counts; down: a fall."""
    remedy: str
    """The advice the alert carries (what a person would change)."""
    scale: Scale = "log"
    floor: float = 1e-8
    """Log scale: values below this count as this (changes beneath the noise floor of
    the metric are not changes)."""
    warmup: int = 6
    window: int = 40
    gap: int = 3
    min_baseline: int = 10
    recent: int = 3
    z: float = 3.0
    min_change: float = 2.0
    sigma_floor: float = 0.1
    """Smallest baseline spread (log: 0.1 ≈ 10 %), so that flat streams do not alert on
    a wobble."""
    persist: int = 3
    admit_z: float = 2.0
    """Only values scoring below this join the baseline."""
    z_clear: float = 3.0
    clear_after: int = 5
    cooldown: int = 20
    rebase_after: int = 30
    """An alert still open after this many points clears: the new level held without a
    breakdown (or after a fix), so it becomes the run's new normal and the baseline is
    learned again from the next points."""
    anchored: bool = False
    """The baseline is the run's early level: the first `window` points admitted after
    warm-up, then frozen (`gap` 0). A moving baseline absorbs a slow drift (10× over 400
    steps is 1.2× per 40-point window); this one measures it against where the run began."""
    sharpening: bool = False
    """A move healthy runs make as the policy sharpens (entropy falling, lengths growing,
    the ESS slowly falling): shown as info while the outcome holds (`BreakdownRule.
    sharpening_drop`), a warning once it falls; the breakdown rule reads it either way."""
    skip_floor: bool = False
    """Values at or below `floor` are not measured yet (a KL of 0 before the policy has
    moved): they neither teach the baseline nor score, so the baseline is the run's own
    level once it has one, not the floor."""
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class DropRule:
    """An outcome (reward, held-out accuracy) falling from its peak.

    drop = (peak − ewma) / (peak − low), peak = running max of the EWMA after warm-up:
    the share of the gain over a know-nothing policy lost; low = `zero`, or the EWMA's
    lowest before the peak if lower (a +1/−1 reward starts below 0). Higher is better.
    """

    metric: str
    """The outcome metric watched (reward or held-out accuracy)."""
    remedy: str
    """The advice the alert carries."""
    ewma_alpha: float = 0.1
    """Smoothing of the noisy per-step outcome (1.0 = none)."""
    warmup: int = 20
    """Steps (`unit`) before the peak is tracked."""
    min_warmup: int = 3
    """Never fewer logged points of warm-up; their median is the run's starting level,
    which counts as a peak (`unit` step): a run that falls below where it began has lost
    its gain even if it never rose."""
    unit: Literal["step", "point"] = "step"
    """step: warm-up and smoothing count training steps (a log every k steps, each point a
    mean over k steps, counts k per point); point: each logged value counts one (an
    evaluation, whatever its interval)."""
    zero: float = 0.0
    """The outcome of a policy that learned nothing (0 for 0/1 rewards)."""
    min_peak_gain: float = 0.05
    """The peak must exceed `zero` by this much: no collapse from nothing."""
    warn_drop: float | None = None
    """Drop that raises a warning (None: the outcome only takes part in the breakdown
    rule, which is where a falling outcome becomes evidence)."""
    crit_drop: float = 0.5
    """Drop that raises a critical: this share of the gain lost."""
    clear_drop: float = 0.15
    """Hysteresis: the alert clears once the drop is back below this."""
    noise_z: float = 4.0
    """A fall counts only beyond this many σ_e, the EWMA's own noise: σ·√(α/(2−α)), σ =
    √(π/4)·mean |x_t − x_{t−1}| over the last 100 steps before an alert, one standard
    error high (`DropDetector.noise`) (a few prompts a step: σ_e ≈ 0.08, the guard keeps
    stable runs quiet; tens: ≈ 0.01, it never binds)."""
    drawdown_margin: float = 2.0
    """A noisy EWMA's running peak rises with the run (~√(2 ln m)·σ_e over m independent
    values) and its troughs deepen alike, so a fall must also exceed that expected range,
    2·√(2 ln m)·σ_e, by this many σ_e (`DropDetector.noise_k`): the largest margin that
    keeps a noisy stable reward from paging without delaying a real collapse's alert
    (bench/results/detection.md). An open alert clears on the fall, not the guard."""
    cooldown: int = 50
    """Points that pass before the rule can fire again."""
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class BreakdownRule:
    """Critical: joint evidence that the approximation or the optimisation is breaking.

    Fires when, among the precursor (warning) alerts opened in the last `horizon` steps
    and still open, there are at least `min_signals` distinct quantities (k1 and k3 of one
    KL count once) with a setting or an `extreme` jump among them, or at least one
    and the outcome (`outcome` metrics, smoothed as the drop rules do) has lost at least
    `outcome_drop` of its gain. The alert blames, with the numbers of each signal, an open
    precursor on a setting (`causes`), else the factor of the IS weight (ρ, r, routing)
    that moved first, else the residual, else the optimisation's symptoms. Clears when no
    precursor is open.
    """

    causes: tuple[str, ...] = SETTINGS
    """Metrics that are settings of the run rather than symptoms: when one of them is among
    the open precursors it is blamed, whatever moved first (a rising learning rate shows
    up as staleness one update later, more mini-batches per rollout as routing drift and
    a growing residual, but turning the setting back is the fix)."""
    min_signals: int = 3
    outcome_drop: float = 0.25
    horizon: int = 30
    extreme: float = 1000.0
    """Joint precursors page without the outcome only with evidence that the run is
    getting worse, not merely changing: a setting among them (`causes`), or one signal at
    least this many times its baseline (a jump of orders of magnitude). 0: any joint set."""
    sharpening_drop: float = 0.25
    """A `sharpening` rule's alert is info until the outcome has lost this share of its
    gain (and the run is getting worse, not sharpening)."""
    outcome: tuple[str, ...] = ("reward/mean", "eval/acc")
    enabled: bool = True
    """false: the rule never fires."""


@dataclass(frozen=True)
class NonFiniteRule:
    """Any NaN or ±inf scalar. Open per metric until the metric is finite again."""

    critical_prefixes: tuple[str, ...] = ("optim/", "is/", "approx/", "policy/", "reward/")
    """Metrics under these prefixes are critical when non-finite; others are warnings."""
    enabled: bool = True
    """false: the rule never fires."""


def setting_rule(
    metric: str, factor: Factor, direction: Literal["up", "down"], remedy: str, fold: float
) -> ChangeRule:
    """A change rule on a setting of the run (`SETTINGS`). A setting is exact, not a noisy
    estimate, so its change is known the step it happens: no median of the last points
    and no persistence (which guard the other rules against noise and would only delay
    this one by a few steps, most of the lead before a fast collapse); spread floor 1 %."""
    return ChangeRule(
        metric, factor, direction, remedy, min_change=fold, recent=1, persist=1, sigma_floor=0.01
    )


def drift_rule(metric: str, floor: float, fold: float) -> ChangeRule:
    """A training-inference mismatch drifting up from the run's early level (`anchored`).

    A mismatch's level is set by the two engines' numerics and the policy's entropy, so it
    starts where it will stay: healthy runs hold it within a small factor (their entropy
    moves little). A sustained rise of several times is the engines diverging (a
    kernel, a stale weight sync, the policy moving where the rollout engine's numerics
    fail), the slow build-up public reports show before mismatch collapses. The fold is
    4× for a KL (quadratic in the log-ratio ℓ) and 2× for a mean |ℓ| or |Δp| (linear): the
    same move of ℓ. Robust to spikes: the median of the last 10 points, held for 5."""
    return ChangeRule(
        metric,
        "train_inference",
        "up",
        R_IS,
        floor=floor,
        min_change=fold,
        anchored=True,
        window=20,
        gap=0,
        recent=10,
        persist=5,
    )


# ---------------------------------------------------------------------------- the defaults
@dataclass(frozen=True)
class DetectorsConfig:
    """One rule per detector; the field name is the detector's name in alerts."""

    # --- info: levels worth showing (the theory's orders of magnitude)
    mismatch_level: LevelRule = LevelRule("mismatch/kl_k1", "train_inference", "high", 1e-2, R_IS)
    """KL(μ_old‖π_old) ≥ 0.01: a large training-inference mismatch (bf16 ≈ 1e-3)."""
    ess_level: LevelRule = LevelRule("mismatch/ess", "train_inference", "low", 0.5, R_IS)
    """Normalised ESS (Σw)²/(n·Σw²) ≤ 0.5: half the tokens carry the batch."""
    routing_level: LevelRule = LevelRule(
        "routing/mismatch_train_infer", "routing", "high", 0.05, R_ROUTING
    )
    """≥ 5 % of (token, layer) expert sets differ between the engines."""
    residual_level: LevelRule = LevelRule(
        "approx/seq_residual", "approximation", "high", 0.2, R_APPROX
    )
    """|Π w − (1 + Σ(w − 1))| ≥ 0.2: the first-order approximation drops a lot."""
    # --- warning by level, where the level has a meaning of its own
    is_truncation: LevelRule = LevelRule(
        "is/trunc_frac", "train_inference", "high", 0.05, R_IS, severity="warning"
    )
    """≥ 5 % of tokens past the IS cap: the correction is discarding the batch."""
    # --- warning: precursors, change against the run's own baseline
    mismatch_kl: ChangeRule = ChangeRule(
        "mismatch/kl_k3", "train_inference", "up", R_IS, floor=1e-5, min_change=3.0
    )
    """Training-inference KL (k3 ≥ 0; verl's rollout_corr/k3_kl, prime-rl's mismatch_kl)."""
    mismatch_kl_k1: ChangeRule = ChangeRule(
        "mismatch/kl_k1", "train_inference", "up", R_IS, floor=1e-5, min_change=3.0
    )
    """The same, k1 (verl's rollout_corr/kl; ours): for runs that log only k1."""
    mismatch_logprob_diff: ChangeRule = ChangeRule(
        "mismatch/logprob_abs_diff", "train_inference", "up", R_IS, floor=1e-4, min_change=3.0
    )
    """Mean |log π_old − log μ_old| (TRL's sampling_logp_difference, slime's)."""
    mismatch_prob_diff: ChangeRule = ChangeRule(
        "mismatch/prob_abs_diff", "train_inference", "up", R_IS, floor=1e-4, min_change=3.0
    )
    """Mean |π_old − μ_old| of the sampled tokens' probabilities (verl's
    training/rollout_probs_diff_mean, logged before verl had rollout_corr/)."""
    mismatch_kl_drift: ChangeRule = drift_rule("mismatch/kl_k3", floor=1e-5, fold=4.0)
    """KL(μ_old‖π_old) (k3) ≥ 4× its early level: a slow drift the moving baseline absorbs."""
    mismatch_logprob_drift: ChangeRule = drift_rule(
        "mismatch/logprob_abs_diff", floor=1e-4, fold=2.0
    )
    """Mean |log π_old − log μ_old| ≥ 2× its early level (TRL's, slime's, open-instruct's)."""
    mismatch_prob_drift: ChangeRule = drift_rule("mismatch/prob_abs_diff", floor=1e-4, fold=2.0)
    """Mean |π_old − μ_old| ≥ 2× its early level (verl's training/rollout_probs_diff_mean)."""
    mismatch_ess: ChangeRule = ChangeRule(
        "mismatch/ess", "train_inference", "down", R_IS, min_change=1.875, sharpening=True
    )
    """The IS weights' effective sample size falling: fewer tokens carry the update."""
    mismatch_chi2: ChangeRule = ChangeRule(
        "mismatch/chi2_token", "train_inference", "up", R_IS, floor=1e-4, min_change=3.0
    )
    """χ² of token weights E[(ρ−1)²]: the variance the IS correction pays."""
    staleness_kl: ChangeRule = ChangeRule(
        "staleness/kl_k3",
        "staleness",
        "up",
        R_STALE,
        floor=1e-8,
        min_change=3.0,
        skip_floor=True,
    )
    """KL(π_old‖π_θ) across the mini-batches (0 on-policy)."""
    staleness_kl_k1: ChangeRule = ChangeRule(
        "staleness/kl_k1",
        "staleness",
        "up",
        R_STALE,
        floor=1e-8,
        min_change=3.0,
        skip_floor=True,
    )
    """The same, k1 (verl's and slime's ppo_kl)."""
    clip_frac: ChangeRule = ChangeRule(
        "staleness/mask_frac", "staleness", "up", R_STALE, floor=1e-3, min_change=3.0
    )
    """Share of tokens masked by the clip rule (verl's pg_clipfrac, TRL's clip_ratio)."""
    clip_stop: ChangeRule = ChangeRule(
        "staleness/mask_frac", "staleness", "down", R_STALE, floor=1e-5, min_change=10.0
    )
    """The clip rule stopped acting: the masked share fell tenfold or more, to (nearly)
    zero (clipping off or ε widened off-policy: the trust region is gone before any ratio
    has moved; a run turned on-policy too; a benign fall, fewer mini-batches, is ~2-4×)."""
    routing_train_infer: ChangeRule = ChangeRule(
        "routing/mismatch_train_infer", "routing", "up", R_ROUTING, floor=1e-3, min_change=3.0
    )
    """Share of (token, layer) expert sets differing, training vs inference engine."""
    routing_stale: ChangeRule = ChangeRule(
        "routing/mismatch_stale", "routing", "up", R_ROUTING, floor=1e-3, min_change=3.0
    )
    """The same across mini-batches, π_θ vs π_old (off-policy only)."""
    approx_residual: ChangeRule = ChangeRule(
        "approx/seq_residual", "approximation", "up", R_APPROX, floor=1e-3, min_change=3.0
    )
    """The first-order residual growing against its own level."""
    grad_norm: ChangeRule = ChangeRule(
        "optim/grad_norm", "optimisation", "up", R_OPTIM, min_change=4.5
    )
    """Gradient norm climbing to ≥ 3× its baseline."""
    entropy_drop: ChangeRule = ChangeRule(
        "policy/entropy",
        "optimisation",
        "down",
        R_OPTIM,
        floor=1e-4,
        min_change=3.0,
        sharpening=True,
    )
    """Entropy falling to half its baseline or less (the paper's no-IS collapse)."""
    entropy_rise: ChangeRule = ChangeRule(
        "policy/entropy", "optimisation", "up", R_OPTIM, floor=1e-4, min_change=3.0
    )
    """Entropy doubling: the policy dissolving into noise."""
    length_rise: ChangeRule = ChangeRule(
        "response/len_mean",
        "optimisation",
        "up",
        R_OPTIM,
        floor=1.0,
        min_change=2.25,
        sharpening=True,
    )
    """Mean response length ≥ 1.5× its baseline (runaway generations)."""
    # --- warning: a setting that moved (SETTINGS; read as exact: `setting_rule`)
    lr_rise: ChangeRule = setting_rule("optim/lr", "optimisation", "up", R_OPTIM, fold=1.2)
    """The learning rate ≥ 1.2× its level after warm-up: a schedule that keeps raising it
    (a warm-up longer than the detectors' own shows here too, and says by how much)."""
    mini_batches_rise: ChangeRule = setting_rule(MINI_BATCHES, "staleness", "up", R_STALE, fold=1.5)
    """More policy updates per rollout than after warm-up (≥ 1.5×): the off-policy degree
    rose, and with it the staleness r_t = π_θ/π_old of the later mini-batches."""
    rollout_precision_drop: ChangeRule = setting_rule(
        ROLLOUT_BITS, "train_inference", "down", R_IS, fold=1.5
    )
    """The rollout engine's weights rounded coarser than after warm-up (bf16 -> FP8 halves
    the bits): the training-inference mismatch ρ_t = π_old/μ_old is about to grow."""
    clip_off: ChangeRule = setting_rule(CLIP_ON, "staleness", "down", R_STALE, fold=1.5)
    """Clipping switched off (`staleness/clip_on` 1 → 0): what `clip_stop` infers from the
    masked share, read at the setting, 2-3 steps sooner, on runs that log the setting."""
    # --- warning: signatures of reported bugs (signatures.py; not precursors)
    kept_mass: KeptMassRule = field(default_factory=KeptMassRule)
    """IS-ratio mean steady below 1: the mass top-p/top-k keeps (TRL issue 6789)."""
    r3_routing_leak: ReplayLeakRule = field(default_factory=ReplayLeakRule)
    """A routing mismatch under R3, where it is 0 (verl PR 5037)."""
    twin_is_metrics: TwinRule = field(default_factory=TwinRule)
    """The training-inference and staleness ratios logged identical (slime issue 1907)."""
    prob_precision: PrecisionRule = field(default_factory=PrecisionRule)
    """Mean |π_old − μ_old| above 0.01: a precision problem (verl's documentation)."""
    # --- critical
    breakdown: BreakdownRule = BreakdownRule()
    """Joint evidence: several precursors at once, or one with the outcome falling."""
    reward_collapse: DropRule = DropRule("reward/mean", R_COLLAPSE)
    """Smoothed training reward lost half of its gain: the collapse itself."""
    eval_collapse: DropRule = DropRule(
        "eval/acc", R_COLLAPSE, ewma_alpha=0.5, warmup=3, unit="point"
    )
    """Held-out accuracy lost half of its gain."""
    nonfinite: NonFiniteRule = NonFiniteRule()
    """NaN/inf in any scalar (loss, gradients, weights...)."""


__all__ = [
    "CLIP_ON",
    "MINI_BATCHES",
    "ROLLOUT_BITS",
    "SETTINGS",
    "BreakdownRule",
    "ChangeRule",
    "DetectorsConfig",
    "DropRule",
    "LevelRule",
    "NonFiniteRule",
]
