"""The detectors' rule types: what a rule watches, in which direction, how hard.

Severities mean something (they are what a user sees and what remediation acts on):

- `info` (`LevelRule`): a level worth showing, e.g. a large training-inference mismatch;
  never paged, never acted on (a mismatch large since step 1 is a setting of the run).
- `warning` (`ChangeRule`): a precursor. A factor of the IS weight w_t = ρ_t·r_t
  (training-inference ρ, staleness r, routing, the first-order residual) or an
  optimisation signal moved against the run's *own* baseline, in the direction that
  precedes collapses, and stayed there. A setting that moved (`SETTINGS`) is a precursor
  too, and the cause of what follows; being exact, it warns the step it moves.
- `critical`: a breakdown under way: joint evidence (`BreakdownRule`), the outcome
  falling hard (`DropRule`), or non-finite values (`NonFiniteRule`).

The default rule set is config.py's `DetectorsConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from monitor.detectors.remedies import R_IS
from monitor.store.records import Factor, Severity

Scale = Literal["log", "linear"]

ROLLOUT_BITS = "engine/rollout_bits"
"""Bits of a rollout weight (16 for bf16, 8 for FP8, 4 for FP4), logged by the trainer."""
MINI_BATCHES = "staleness/mini_batches"
"""Policy updates per rollout (the off-policy degree), logged by the trainer."""
CLIP_ON = "staleness/clip_on"
"""1 while the clip rule's mask M_t can act (the trust region is on), 0 once it is off."""
LENGTH_NORM = "approx/length_norm"
"""1 while the loss divides each response's token sum by its length (GRPO's
seq-mean-token-mean), 0 for MiniRL's plain sum: a setting of the objective."""
SETTINGS = ("optim/lr", MINI_BATCHES, ROLLOUT_BITS, CLIP_ON, LENGTH_NORM)
"""Settings of the run rather than symptoms (the lr, the policy updates per rollout, the
rollout weights' bits, clipping on, length normalisation): one that moved, or that the run
was set up with against the paper's recipe (setup.py), is the cause of what follows it."""


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
    steps is 1.2× per 40-point window); this one measures it against where the run began,
    with the points' step-to-step noise as its spread (`drift_rule` says why)."""
    sharpening: bool = False
    """A move healthy runs make as the policy sharpens (entropy falling, lengths growing,
    the ESS slowly falling): shown as info while the outcome holds (`BreakdownRule.
    sharpening_drop`), a warning once it falls; the breakdown rule reads it either way."""
    skip_floor: bool = False
    """Values at or below `floor` carry no scale (a KL of 0 before the policy has moved, a
    gradient norm of 0 on a step with nothing to learn): they neither teach the baseline
    nor score, so the baseline is the run's own level once it has one, not the floor."""
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
    """step: the warm-up counts training steps (a log every k steps counts k per point);
    point: each logged value counts one (an evaluation, whatever its interval). The EWMA
    smooths per point either way: per step, a sparse log's noisy reward paged stable runs."""
    zero: float = 0.0
    """The outcome of a policy that learned nothing (0 for 0/1 rewards)."""
    min_peak_gain: float = 0.05
    """The peak must exceed `zero` by this much: no collapse from nothing (and by the
    fall's noise guard, `noise_z`/`drawdown_margin`: a gain within the noise is none)."""
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
    from_start: bool = False
    """The first observation is a peak too, even inside the warm-up: a run that falls
    below its starting level from the start has collapsed (for held-out accuracy,
    measured once per evaluation, so little noise to mistake for a peak)."""


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
    skippable: tuple[str, ...] = ("optim/grad_norm",)
    """Critical only when non-finite twice in a row: a lone inf/NaN gradient norm is also
    a step the optimizer skipped (mixed-precision loss scaling, DeepSpeed's overflow
    check), after which training goes on; a divergence stays non-finite, and turns the
    loss non-finite too, which is critical at once. The first one is a warning."""
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


def rise_rule(
    metric: str, factor: Factor, remedy: str, floor: float, skip_floor: bool = False
) -> ChangeRule:
    """The common precursor: `metric` rose threefold or more against the run's own moving
    baseline (log scale; values below `floor`, the metric's noise floor, count as it)."""
    return ChangeRule(
        metric, factor, "up", remedy, floor=floor, min_change=3.0, skip_floor=skip_floor
    )


def drift_rule(metric: str, floor: float, fold: float) -> ChangeRule:
    """A training-inference mismatch drifting up from the run's early level (`anchored`).

    A mismatch's level is set by the two engines' numerics and the policy's entropy, so it
    starts where it will stay: healthy runs hold it within a small factor (their entropy
    moves little). A sustained rise of several times is the engines diverging (a
    kernel, a stale weight sync, the policy moving where the rollout engine's numerics
    fail), the slow build-up public reports show before mismatch collapses. The fold is
    4× for a KL (quadratic in the log-ratio ℓ) and 2× for a mean |ℓ| or |Δp| (linear): the
    same move of ℓ. Robust to spikes: the median of the last 10 points, held for 5. The
    early level's spread is its step-to-step noise (`base.step_noise`), not its MAD: a
    level learned while the mismatch already climbed (100× over its 20 points) has a MAD
    that takes the climb for noise, and a 1000× drift would never score."""
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
