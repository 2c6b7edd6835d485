"""Precursors of a collapse: the metrics that moved away from their level before it.

A precursor is any metric (not the outcome's family or OUTCOME_LIKE, not BOOKKEEPING)
whose robust z against its baseline reaches Z_MOVED for PERSIST points before the onset;
lead = onset − moved. The baseline is the first half of the steps before the onset from
where the run had learned (`collapse.learned_at`), on a log scale when the metric is
positive: taken while the run learns, it would list the learning itself (longer answers,
a larger gradient) as precursors of the fall. Values the metric's rule says carry no
scale (a gradient norm of 0: `no_scale_rule`) are left out, as the live rule leaves them
out. The factor first broken (`analyze`) is that of the earliest-moving precursor among
the IS factors' metrics.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from monitor.analysis.collapse import learned_at
from monitor.config import MonitorConfig
from monitor.detectors.change import carries_no_scale
from monitor.detectors.rules import ChangeRule, LevelRule

Z_MOVED = 5.0
PERSIST = 3
MIN_BASELINE = 8
_PREFIX_FACTOR = {
    "mismatch/": "train_inference",
    "is/": "train_inference",  # w = ρ·r; its cap applies to ρ by default (loss.is_cap_target)
    "staleness/": "staleness",
    "routing/": "routing",
    "approx/": "approximation",
    "policy/": "optimisation",
    "optim/": "optimisation",
    "response/": "outcome",
    "reward/": "outcome",
    "eval/": "outcome",
}
BOOKKEEPING = re.compile(
    r"(^|/)(perf|timing\w*|time|\w*_time|\w*_seconds?|\w*memory\w*|\w*mem_\w*|epoch|\w*global_step|"
    r"num_tokens|wall_time)(/|$)"
)
"""Names no precursor has: timings, memory, counters that grow with every step (ours
under perf/, verl's timing_s/ and actor/perf/, TRL's epoch and num_tokens...)."""
OUTCOME_LIKE = re.compile(r"(^|/)(rewards?|scores?)(/|_|$)")
"""Other names of the outcome or of its parts, not mapped onto ours (TRL's
rewards/<function>/mean and reward_std, verl's critic/score/max and critic/rewards/mean):
the reward falling is the collapse, not a precursor of it."""


@dataclass(frozen=True)
class Precursor:
    metric: str
    factor: str | None
    moved_step: int
    lead: int
    """Steps from the move to the onset (0 = moved at the onset)."""
    direction: str
    """'up' or 'down' (on the metric's own scale)."""
    z: float
    """|z| at the move (inf for a non-finite value)."""
    baseline: float
    value: float
    log_scale: bool


def moved_at(
    steps: np.ndarray,
    values: np.ndarray,
    baseline_end: int,
    z_moved: float = Z_MOVED,
    since: float = -math.inf,
) -> tuple[int, float, float, float, bool] | None:
    """(step, z, baseline, value, log_scale) of the first persistent move after the
    baseline (since <= steps < baseline_end), or None."""
    base = values[(steps >= since) & (steps < baseline_end) & np.isfinite(values)]
    if len(base) < MIN_BASELINE:
        return None
    log_scale = bool(np.all(base > 0))
    tf = (lambda v: np.log(np.maximum(v, 1e-300))) if log_scale else (lambda v: v)
    tb = tf(base)
    med = float(np.median(tb))
    deviation = np.abs(tb - med)
    mad = float(np.median(deviation))
    # σ from the MAD, or, when most of the baseline sits at one value (a clip share of 0
    # on most steps), from the mean deviation (σ·√(2/π) for normal noise): a MAD of 0
    # would read the level the other points already had as a move of 10^10 σ
    spread = 1.4826 * mad if mad > 0 else math.sqrt(math.pi / 2) * float(np.mean(deviation))
    floor = 0.05 if log_scale else max(0.01 * abs(med), 1e-12)
    scale = max(spread, floor)
    after = steps >= baseline_end
    s_after, v_after = steps[after], values[after]
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(np.isfinite(v_after), (tf(v_after) - med) / scale, np.inf)
    big = np.abs(z) >= z_moved
    # the first index that starts PERSIST consecutive moves
    runs = np.convolve(big.astype(int), np.ones(PERSIST, int), mode="valid")
    hits = np.nonzero(runs == PERSIST)[0]
    if len(hits) == 0:
        return None
    j = int(hits[0])
    baseline = float(np.exp(med)) if log_scale else med
    return int(s_after[j]), float(z[j]), baseline, float(v_after[j]), log_scale


def _rules_of(metric: str, config: MonitorConfig) -> list[ChangeRule | LevelRule]:
    """The per-metric detector rules that watch `metric`, in the config's order."""
    rules = (getattr(config.detectors, f.name) for f in dataclasses.fields(config.detectors))
    return [r for r in rules if isinstance(r, ChangeRule | LevelRule) and r.metric == metric]


def factor_of(metric: str, config: MonitorConfig) -> str | None:
    """The factor a detector rule assigns to `metric`, else the namespace's."""
    rules = _rules_of(metric, config)
    if rules:
        return rules[0].factor
    return next((fac for pre, fac in _PREFIX_FACTOR.items() if metric.startswith(pre)), None)


def no_scale_rule(metric: str, config: MonitorConfig) -> ChangeRule | None:
    """`metric`'s rule whose low values carry no scale (`ChangeRule.skip_floor`: a
    gradient norm of 0 on a step with nothing to learn), else None. The analysis drops
    those values as the live rule does (`change.carries_no_scale`): a baseline of zeros
    would read any later value as a move of z ~ 10^11."""
    for rule in _rules_of(metric, config):
        if isinstance(rule, ChangeRule) and rule.skip_floor:
            return rule
    return None


def baseline_steps(
    series: dict[str, tuple[np.ndarray, np.ndarray]], onset: int, outcome: str
) -> tuple[np.ndarray, int | None]:
    """(the steps a precursor baseline may use: before the onset, from where the run had
    learned, since one from before would list the learning; that step, or None)."""
    steps = np.unique(np.concatenate([s for s, _ in series.values()] or [np.array([])]))
    learned = learned_at(*series[outcome], onset) if outcome in series else None
    keep = (steps < onset) & (steps >= (-math.inf if learned is None else learned))
    return steps[keep], learned


def find_precursors(
    series: dict[str, tuple[np.ndarray, np.ndarray]],
    onset: int,
    outcome: str,
    config: MonitorConfig,
) -> tuple[int, int, list[Precursor]] | None:
    """(baseline_start, baseline_end, precursors) of a collapse at `onset` (module
    docstring), earliest first; None with fewer than 2·MIN_BASELINE `baseline_steps`."""
    pre, _ = baseline_steps(series, onset, outcome)
    if len(pre) < 2 * MIN_BASELINE:
        return None
    baseline_start, baseline_end = int(pre[0]), int(pre[len(pre) // 2])
    family = outcome.split("/")[0] + "/"
    found = []
    for name, (s, v) in series.items():
        if name.startswith(family) or OUTCOME_LIKE.search(name) or BOOKKEEPING.search(name):
            continue
        rule = no_scale_rule(name, config)
        if rule is not None:  # a NaN is kept: non-finite is a move
            keep = np.array([not carries_no_scale(rule, x) for x in v], dtype=bool)
            s, v = s[keep], v[keep]
        moved = moved_at(s, v, baseline_end, since=baseline_start)
        if moved is None or moved[0] > onset:
            continue
        step, z, base, value, log_scale = moved
        direction = "non-finite" if not math.isfinite(value) else "up" if z > 0 else "down"
        found.append(
            Precursor(
                name,
                factor_of(name, config),
                step,
                onset - step,
                direction,
                abs(z),
                base,
                value,
                log_scale,
            )
        )
    found.sort(key=lambda p: (-p.lead, -p.z, p.metric))
    return baseline_start, baseline_end, found
