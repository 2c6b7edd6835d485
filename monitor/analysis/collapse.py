"""When a run collapsed: the outcome's onset of a fall, a divergence, where it had learned.

Definitions, stated once (what `minirl analyze` and the benchmarks' labels use):
- Outcome: the first of OUTCOME_METRICS with at least MIN_POINTS finite values, unless chosen.
- Collapse: the outcome smoothed by a centred running median over w = clip(n/25, 5, 51)
  points; peak = its maximum, final = the median of the last w raw values. By the
  monitor's drop rule (`reward_collapse`, `eval_collapse` for eval/acc), the run collapsed
  when the peak gained ≥ `min_peak_gain` over low (`zero`, or the lowest smoothed point
  before the peak if lower) and (peak − final) / (peak − low) ≥ crit_drop (a
  `from_start` rule: the first value is a peak too).
- Onset: the first step after the peak where the smoothed outcome falls below peak −
  ONSET_FRAC · (peak − final) for good, beyond its noise (`fall_z`); else `diverged_at`.
- Learned: where the smoothed outcome was half-way from its low to its pre-onset peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.detectors.base import step_noise
from monitor.detectors.rules import DropRule

OUTCOME_METRICS = ("reward/acc", "reward/mean", "eval/acc")
MIN_POINTS = 20
ONSET_FRAC = 0.2
DIVERGENCE_METRICS = ("optim/loss", "optim/grad_norm")


@dataclass(frozen=True)
class Onset:
    metric: str
    step: int
    peak_step: int
    peak: float
    final: float
    drop: float
    """(peak − final) / (peak − low): the share of the gain that was lost."""


def running_median(x: np.ndarray, w: int) -> np.ndarray:
    """Centred running median of odd width w, the window shrinking at the ends."""
    half = w // 2
    padded = np.pad(x, half, mode="constant", constant_values=np.nan)
    windows = np.lib.stride_tricks.sliding_window_view(padded, w)
    return np.nanmedian(windows, axis=1)


def smoothing_width(n: int) -> int:
    w = int(np.clip(n // 25, 5, 51))
    return w if w % 2 else w + 1


def find_onset(steps: np.ndarray, values: np.ndarray, metric: str, rule: DropRule) -> Onset | None:
    """The collapse onset of one outcome series (module docstring), or None."""
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    if len(values) < MIN_POINTS:
        return None
    w = smoothing_width(len(values))
    smooth = running_median(values, w)
    p = int(np.argmax(smooth))
    if rule.from_start and values[0] > smooth[p]:  # fell below where it started
        smooth = smooth.copy()
        smooth[0], p = values[0], 0
    peak, final = float(smooth[p]), float(np.median(values[-w:]))
    gain = peak - min(rule.zero, float(smooth[: p + 1].min()))
    if gain < rule.min_peak_gain or (peak - final) / gain < rule.crit_drop:
        return None
    below = smooth < peak - ONSET_FRAC * (peak - final)
    # the first index after the peak from which `below` holds to the end
    tail_ok = np.flip(np.logical_and.accumulate(np.flip(below)))
    idx = np.nonzero(tail_ok[p:])[0]
    if len(idx) == 0:
        return None
    i = p + int(idx[0])
    if fall_z(values, i) < rule.noise_z:  # a fall the outcome's own noise explains
        return None
    return Onset(metric, int(steps[i]), int(steps[p]), peak, final, (peak - final) / gain)


def fall_z(values: np.ndarray, i: int) -> float:
    """How many standard errors the mean of values[i:] lies below the mean of as many
    values before it (fewer when the log has fewer). The peak of a running median is the
    highest of many noisy windows and its tail the lowest, so on a noisy outcome with no
    trend (a few prompts a step, a run that never trained) peak and final differ by half
    the "gain" by chance; a collapse is a fall this noise cannot explain. σ is the raw
    outcome's step-to-step noise (`step_noise`: median |Δx| = 0.954σ for i.i.d. noise; the median,
    so that the collapse's own jump does not count as noise; the mean where most changes
    are 0, as with a reward of a few 0/1 answers)."""
    after = values[i:]
    before = values[max(0, i - len(after)) : i]
    if len(before) == 0 or len(after) == 0:
        return 0.0
    sigma = step_noise(values.tolist())
    if sigma == 0:
        sigma = float(np.mean(np.abs(np.diff(values)))) * math.sqrt(math.pi) / 2
    fall = float(np.mean(before) - np.mean(after))
    if sigma == 0:
        return math.inf if fall > 0 else 0.0
    return fall / (sigma * math.sqrt(1 / len(before) + 1 / len(after)))


def diverged_at(steps: np.ndarray, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> int | None:
    """First step from which the loss or the gradient norm (DIVERGENCE_METRICS) is
    non-finite at every logged step to the end: a run can diverge with no outcome left to
    fall (the last evaluation before the NaN still high)."""
    bad = np.zeros(len(steps), dtype=bool)
    for name in DIVERGENCE_METRICS:
        if name in series:
            s, v = series[name]
            bad |= np.isin(steps, s[~np.isfinite(v)])
    if not bad.any() or not bad[-1]:
        return None
    good = np.nonzero(~bad)[0]
    return int(steps[good[-1] + 1 if len(good) else 0])


def learned_at(steps: np.ndarray, values: np.ndarray, before: int) -> int | None:
    """The first step where the outcome, smoothed as `find_onset` smooths it, was half-way
    from its low to its peak before `before`: from there the run had learned. A baseline
    taken while it learns makes the learning itself (longer answers, a larger gradient, a
    clip share growing with the reward) read as precursors of the fall."""
    ok = np.isfinite(values) & (steps < before)
    s, v = steps[ok], values[ok]
    if len(v) == 0:
        return None
    smooth = running_median(v, smoothing_width(len(v)))
    p = int(np.argmax(smooth))
    half = (float(smooth[: p + 1].min()) + float(smooth[p])) / 2
    return int(s[int(np.argmax(smooth >= half))])
