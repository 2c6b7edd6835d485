"""Which checkpoints are healthy: measured, not assumed.

A checkpoint is healthy when the run's held-out score at its step is within noise of the
run's best score so far, and no precursor (a warning or critical alert on the run's
state, `run_health.is_precursor`) was open when it was taken. A rollback goes to the
latest healthy checkpoint; a run has recovered when its score is back within noise of
the best it reached before the episode, never relative to an evaluation that had
already fallen. A run that falls from its first evaluation on has
its first checkpoint as the healthy one (the starting score is its best).

Noise is read from the score series itself (the scatter of successive differences, a
robust estimate) with a floor, because most trainers do not log how many samples an
evaluation used. Pure functions of their inputs: nothing here reads a store or a file.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_NOISE = 0.01
"""Floor of the noise band (in the score's units): a series too short or too smooth to
measure its scatter still tolerates a difference of one point of accuracy."""
NOISE_WIDTH = 2.0
"""How many robust standard deviations of one evaluation count as 'within noise'."""


Scores = Sequence[tuple[int, float]]
"""(step, held-out score) of each evaluation, higher is better."""
Intervals = Sequence[tuple[int, int | None]]
"""(opened, cleared or None) of each warning or critical alert."""


@dataclass(frozen=True)
class Verdict:
    """Why a checkpoint is (or is not) healthy."""

    step: int
    healthy: bool
    score: float | None
    """The held-out score at the checkpoint (the last evaluation at or before it)."""
    best: float | None
    """The run's best score up to the checkpoint."""
    noise: float
    reason: str


def noise_band(scores: Sequence[float]) -> float:
    """`NOISE_WIDTH` robust standard deviations of one evaluation, at least `MIN_NOISE`.

    The scatter of successive differences around their median (1.4826 · MAD / √2)
    measures evaluation noise without mistaking the run's trend for it: a steady fall
    moves every difference alike and leaves no scatter."""
    finite = [s for s in scores if math.isfinite(s)]
    diffs = [b - a for a, b in itertools.pairwise(finite)]
    if len(diffs) < 3:
        return MIN_NOISE
    centre = _median(diffs)
    mad = _median([abs(d - centre) for d in diffs])
    return max(MIN_NOISE, NOISE_WIDTH * 1.4826 * mad / math.sqrt(2))


def _median(xs: Sequence[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _open_at(
    step: int, precursors: Sequence[tuple[int, int | None]]
) -> tuple[int, int | None] | None:
    """The first precursor interval [opened, cleared) that contains `step`, if any."""
    for opened, cleared in precursors:
        if opened <= step and (cleared is None or step < cleared):
            return opened, cleared
    return None


def judge(
    checkpoints: Sequence[int],
    scores: Sequence[tuple[int, float]],
    precursors: Sequence[tuple[int, int | None]] = (),
    noise: float | None = None,
) -> list[Verdict]:
    """A verdict for each checkpoint step, oldest first.

    `scores`: (step, held-out score) of every evaluation, higher is better. `precursors`:
    (opened, cleared or None) of each warning/critical alert. `noise`: the band, else read
    from the scores taken while no precursor was open. A checkpoint with no evaluation at
    or before it is judged on the precursors alone (nothing measured can contradict it)."""
    series = sorted((s, v) for s, v in scores if math.isfinite(v))
    # the noise of evaluations no precursor was open at: a collapse's falls and a
    # rollback's jump back would pass for noise otherwise
    calm = [v for s, v in series if _open_at(s, precursors) is None]
    band = noise_band(calm) if noise is None else noise
    verdicts = []
    for step in sorted(checkpoints):
        seen = [v for s, v in series if s <= step]
        score = seen[-1] if seen else None
        best = max(seen) if seen else None
        interval = _open_at(step, precursors)
        if interval is not None:
            opened, cleared = interval
            until = "still open" if cleared is None else f"cleared at {cleared}"
            why = f"a precursor was open (from step {opened}, {until})"
            ok = False
        elif score is None:
            why, ok = "no evaluation yet and no precursor open", True
        elif score >= best - band:
            why = f"score {score:.3g} within noise ({band:.2g}) of the best so far {best:.3g}"
            ok = True
        else:
            why = f"score {score:.3g} more than noise ({band:.2g}) below the best {best:.3g}"
            ok = False
        verdicts.append(Verdict(step, ok, score, best, band, why))
    return verdicts


def last_healthy(verdicts: Sequence[Verdict], before: int | None = None) -> Verdict | None:
    """The latest healthy one of `verdicts` (`judge`'s), strictly before `before` when
    given, or None."""
    ok = [v for v in verdicts if v.healthy and (before is None or v.step < before)]
    return max(ok, key=lambda v: v.step) if ok else None


def recovered(
    score: float, scores_before: Sequence[tuple[int, float]], noise: float | None = None
) -> tuple[bool, str]:
    """Whether `score` is back within noise of the best score before the episode."""
    finite = [v for _, v in scores_before if math.isfinite(v)]
    if not finite:
        return False, "no evaluation before the episode to compare with"
    best = max(finite)
    band = noise_band(finite) if noise is None else noise
    if score >= best - band:
        why = f"{score:.3g}: back within noise ({band:.2g}) of the pre-episode best {best:.3g}"
        return True, why
    return False, f"{score:.3g}: still below the pre-episode best {best:.3g} (noise {band:.2g})"
