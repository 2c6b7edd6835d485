"""The detectors' default rule set (`DetectorsConfig`): every rule a run is watched by.

The rule types and what their severities mean are rules.py. The defaults were chosen
once on a tuning set of runs and frozen (bench/results/detection.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.detectors.remedies import R_APPROX, R_COLLAPSE, R_IS, R_OPTIM, R_ROUTING, R_STALE
from monitor.detectors.rules import (
    CLIP_ON,
    MINI_BATCHES,
    ROLLOUT_BITS,
    SETTINGS,
    BreakdownRule,
    ChangeRule,
    DropRule,
    LevelRule,
    NonFiniteRule,
    drift_rule,
    rise_rule,
    setting_rule,
)
from monitor.detectors.setup import LengthNormRule, UnclippedOffPolicyRule
from monitor.detectors.signatures import KeptMassRule, PrecisionRule, ReplayLeakRule, TwinRule


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
    mismatch_kl: ChangeRule = rise_rule("mismatch/kl_k3", "train_inference", R_IS, 1e-5)
    """Training-inference KL (k3 ≥ 0; verl's rollout_corr/k3_kl, prime-rl's mismatch_kl)."""
    mismatch_kl_k1: ChangeRule = rise_rule("mismatch/kl_k1", "train_inference", R_IS, 1e-5)
    """The same, k1 (verl's rollout_corr/kl; ours): for runs that log only k1."""
    mismatch_logprob_diff: ChangeRule = rise_rule(
        "mismatch/logprob_abs_diff", "train_inference", R_IS, 1e-4
    )
    """Mean |log π_old − log μ_old| (TRL's sampling_logp_difference, slime's)."""
    mismatch_prob_diff: ChangeRule = rise_rule(
        "mismatch/prob_abs_diff", "train_inference", R_IS, 1e-4
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
    mismatch_chi2: ChangeRule = rise_rule("mismatch/chi2_token", "train_inference", R_IS, 1e-4)
    """χ² of token weights E[(ρ−1)²]: the variance the IS correction pays."""
    staleness_kl: ChangeRule = rise_rule(
        "staleness/kl_k3", "staleness", R_STALE, 1e-8, skip_floor=True
    )
    """KL(π_old‖π_θ) across the mini-batches (0 on-policy)."""
    staleness_kl_k1: ChangeRule = rise_rule(
        "staleness/kl_k1", "staleness", R_STALE, 1e-8, skip_floor=True
    )
    """The same, k1 (verl's and slime's ppo_kl)."""
    clip_frac: ChangeRule = rise_rule("staleness/mask_frac", "staleness", R_STALE, 3e-3)
    """Share of tokens masked by the clip rule (verl's pg_clipfrac, TRL's clip_ratio).
    The floor is the share a healthy clipped update masks anyway (a few tokens in a
    thousand, on the lab's healthy runs and on public PPO and GRPO runs), so a share
    moving within it is no rise (detection.md, "What we tried")."""
    clip_stop: ChangeRule = ChangeRule(
        "staleness/mask_frac", "staleness", "down", R_STALE, floor=1e-4, min_change=10.0
    )
    """The clip rule stopped acting: the masked share fell tenfold or more, to (nearly)
    zero (clipping off or ε widened off-policy: the trust region is gone before any ratio
    has moved; a run turned on-policy too; a benign fall, fewer mini-batches, is ~2-4×).
    The floor makes "acting" mean a masked share of at least tenfold the floor before the
    fall: an on-policy run's stray clipped token going to none is not a rule stopping."""
    routing_train_infer: ChangeRule = rise_rule(
        "routing/mismatch_train_infer", "routing", R_ROUTING, 1e-3
    )
    """Share of (token, layer) expert sets differing, training vs inference engine."""
    routing_stale: ChangeRule = rise_rule("routing/mismatch_stale", "routing", R_ROUTING, 1e-3)
    """The same across mini-batches, π_θ vs π_old (off-policy only)."""
    approx_residual: ChangeRule = rise_rule("approx/seq_residual", "approximation", R_APPROX, 1e-3)
    """The first-order residual growing against its own level."""
    grad_norm: ChangeRule = ChangeRule(
        "optim/grad_norm", "optimisation", "up", R_OPTIM, min_change=4.5, skip_floor=True
    )
    """Gradient norm climbing to ≥ 4.5× its baseline. A norm of exactly 0 is a step with
    nothing to learn (every group's advantages zero), not a reading of the scale: a
    baseline of such steps would make any later gradient an explosion."""
    entropy_drop: ChangeRule = ChangeRule(
        "policy/entropy",
        "optimisation",
        "down",
        R_OPTIM,
        floor=1e-4,
        min_change=3.0,
        sharpening=True,
    )
    """Entropy falling to a third of its baseline or less (the paper's no-IS collapse)."""
    entropy_rise: ChangeRule = rise_rule("policy/entropy", "optimisation", R_OPTIM, 1e-4)
    """Entropy tripling: the policy dissolving into noise."""
    length_rise: ChangeRule = ChangeRule(
        "response/len_mean",
        "optimisation",
        "up",
        R_OPTIM,
        floor=1.0,
        min_change=2.25,
        sharpening=True,
    )
    """Mean response length ≥ 2.25× its baseline (runaway generations)."""
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
    # --- warning: a run set up against the paper's recipe (setup.py; its first settings)
    unclipped_off_policy: UnclippedOffPolicyRule = field(default_factory=UnclippedOffPolicyRule)
    """Set up with several policy updates per rollout and the clip mask off: what the
    setting rules would warn of had the run changed to it, for a run that started so."""
    length_normalised: LengthNormRule = field(default_factory=LengthNormRule)
    """Set up with the loss normalised by each response's length (GRPO's): the token-level
    objective is then no first-order approximation of the sequence-level one."""
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
        "eval/acc", R_COLLAPSE, ewma_alpha=0.5, warmup=3, unit="point", from_start=True
    )
    """Held-out accuracy lost half of its gain."""
    nonfinite: NonFiniteRule = NonFiniteRule()
    """NaN/inf in any scalar (loss, gradients, weights...)."""


SETUP_DETECTORS = frozenset(
    name
    for name, rule in vars(DetectorsConfig()).items()
    if isinstance(rule, UnclippedOffPolicyRule | LengthNormRule)
)
"""The detectors that judge how a run is set up (setup.py), not how it is doing."""


__all__ = [
    "CLIP_ON",
    "MINI_BATCHES",
    "ROLLOUT_BITS",
    "SETTINGS",
    "SETUP_DETECTORS",
    "BreakdownRule",
    "ChangeRule",
    "DetectorsConfig",
    "DropRule",
    "LevelRule",
    "NonFiniteRule",
]
