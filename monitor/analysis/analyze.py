"""Post-hoc analysis of a run: collapse onset, precursors ranked by lead, the factor first broken.

Definitions, stated once (what `minirl analyze` reports):
- Outcome: the first of OUTCOME_METRICS with at least MIN_POINTS finite values, unless chosen.
- Collapse: the outcome smoothed by a centred running median over w = clip(n/25, 5, 51)
  points; peak = its maximum, final = the median of the last w raw values. By the
  monitor's drop rule (`reward_collapse`, `eval_collapse` for eval/acc), the run collapsed
  when the peak gained ≥ `min_peak_gain` over low (`zero`, or the lowest smoothed point
  before the peak if lower) and (peak − final) / (peak − low) ≥ crit_drop (a
  `from_start` rule: the first value is a peak too).
- Onset: the first step after the peak where the smoothed outcome falls below peak −
  ONSET_FRAC · (peak − final) for good, beyond its noise (`fall_z`); else `diverged_at`.
- Precursor: any other metric (not the outcome's family, not BOOKKEEPING) whose robust z
  against its baseline (the first half of the pre-onset steps once the run had learned,
  `learned_at`; log scale if positive) reaches Z_MOVED for PERSIST points; lead = onset − moved.
- Factor first broken: that of the earliest-moving precursor among the IS factors' metrics.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.analysis.recovery import recovery_of
from monitor.analysis.replay import DISAGREES, UNREADABLE, agrees, replay
from monitor.config import MonitorConfig
from monitor.detectors.rules import ChangeRule, DropRule, LevelRule
from monitor.store.reader import RunReader

OUTCOME_METRICS = ("reward/acc", "reward/mean", "eval/acc")
MIN_POINTS = 20
ONSET_FRAC = 0.2
DIVERGENCE_METRICS = ("optim/loss", "optim/grad_norm")
Z_MOVED = 5.0
PERSIST = 3
MIN_BASELINE = 8
IS_FACTORS = ("train_inference", "staleness", "routing")
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


@dataclass(frozen=True)
class Onset:
    metric: str
    step: int
    peak_step: int
    peak: float
    final: float
    drop: float
    """(peak − final) / (peak − low): the share of the gain that was lost."""


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


@dataclass
class Analysis:
    run: str
    run_id: str
    first_step: int | None
    last_step: int | None
    outcome: str | None
    onset: Onset | None
    precursors: list[Precursor] = field(default_factory=list)
    first_factor: str | None = None
    baseline_start: int | None = None
    baseline_end: int | None = None
    """Precursor baselines use the steps from `baseline_start` up to this one."""
    diverged: int | None = None
    """First step of a divergence (`diverged_at`), or None."""
    alerts: list[Any] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replayed: list[dict[str, Any]] = field(default_factory=list)
    """The warning and critical alerts the detectors raise when the stored stream is
    replayed through them (the same `DetectorSet` `Monitor.log` runs live)."""
    replay_agrees: bool | None = None
    """Whether the replay opens the same (step, detector) alerts as were stored live
    (None: nothing was stored live, e.g. a run recorded without detectors)."""
    recovery: dict[str, Any] | None = None
    """Whether the last held-out accuracy is back within noise of the best before the
    run's last episode (`recovery_of`); None without an episode or evals."""
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    """Every scalar of the run, for the report's charts."""

    @property
    def collapse_step(self) -> int | None:
        """The onset of the outcome's fall, else of a divergence: what precursors lead."""
        return self.onset.step if self.onset is not None else self.diverged

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (NaN and inf as strings), without the raw series."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return str(value)
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            return value

        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "series"}
        out["collapsed"] = self.collapse_step is not None
        return clean(out)


# ------------------------------------------------------------------------ the maths


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
    outcome's step-to-step noise: median |Δx| = 0.954σ for i.i.d. normal noise (the median,
    so that the collapse's own jump does not count as noise; the mean where most changes
    are 0, as with a reward of a few 0/1 answers)."""
    after = values[i:]
    before = values[max(0, i - len(after)) : i]
    if len(before) == 0 or len(after) == 0:
        return 0.0
    changes = np.abs(np.diff(values))
    sigma = float(np.median(changes)) / 0.954
    if sigma == 0:
        sigma = float(np.mean(changes)) * math.sqrt(math.pi) / 2
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
    mad = float(np.median(np.abs(tb - med)))
    floor = 0.05 if log_scale else max(0.01 * abs(med), 1e-12)
    scale = max(1.4826 * mad, floor)
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


def factor_of(metric: str, config: MonitorConfig) -> str | None:
    """The factor a detector rule assigns to `metric`, else the namespace's."""
    for f in dataclasses.fields(config.detectors):
        rule = getattr(config.detectors, f.name)
        if isinstance(rule, ChangeRule | LevelRule) and rule.metric == metric:
            return rule.factor
    return next((fac for pre, fac in _PREFIX_FACTOR.items() if metric.startswith(pre)), None)


# ------------------------------------------------------------------------ the run


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
        if name.startswith(family) or BOOKKEEPING.search(name):
            continue
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


def analyze_run(
    run: str, outcome: str | None = None, config: MonitorConfig | None = None
) -> Analysis:
    """Read a run store and analyse it (see the module docstring)."""
    config = config or MonitorConfig()
    with RunReader(run) as reader, reader.snapshot():
        meta = reader.meta()
        names = reader.metric_names()
        series = reader.scalars(names)
        steps = reader.steps()
        result = Analysis(
            run=str(run),
            run_id=meta.run_id,
            first_step=int(steps[0]) if len(steps) else None,
            last_step=int(steps[-1]) if len(steps) else None,
            outcome=None,
            onset=None,
            alerts=[dataclasses.asdict(a) for a in reader.alerts()],
            actions=[dataclasses.asdict(a) for a in reader.actions()],
            events=[dataclasses.asdict(e) for e in reader.events()],
            series=series,
        )
    live_config = meta.config.get("monitor") if isinstance(meta.config, dict) else None
    result.replayed, read = replay(series, live_config)
    result.notes += [] if read else [UNREADABLE]
    if result.alerts:
        result.replay_agrees = agrees(result.alerts, result.replayed)
        result.notes += [] if result.replay_agrees else [DISAGREES]
    if "eval/acc" in series:
        result.recovery = recovery_of(series["eval/acc"], result.alerts)
    if outcome is not None and outcome not in series:
        from core.errors import UserError

        raise UserError(f"metric {outcome!r} is not in {run}; it has: {', '.join(names)}")
    candidates = [outcome] if outcome else list(OUTCOME_METRICS)
    for name in candidates:
        if name in series and np.isfinite(series[name][1]).sum() >= MIN_POINTS:
            result.outcome = name
            break
    result.diverged = diverged_at(steps, series)
    if result.outcome is None:
        result.notes.append(
            f"no outcome metric with ≥ {MIN_POINTS} values ({', '.join(candidates)}): "
            "collapse onset not assessed"
        )
    else:
        drops = config.detectors
        rule = drops.eval_collapse if result.outcome == "eval/acc" else drops.reward_collapse
        result.onset = find_onset(*series[result.outcome], result.outcome, rule)
        if result.onset is None:
            result.notes.append(f"no collapse: {result.outcome} kept at least half of its gain")
    onset = result.collapse_step
    if onset is None:
        return result
    outcome_name = result.outcome or OUTCOME_METRICS[0]
    found = find_precursors(series, onset, outcome_name, config)
    if found is None:
        pre, since = baseline_steps(series, onset, outcome_name)
        learned = "" if since is None else f" from where the run had learned (step {since})"
        result.notes.append(f"only {len(pre)} steps{learned} to the onset: too few for a baseline")
        return result
    result.baseline_start, result.baseline_end, result.precursors = found
    first = next((p for p in result.precursors if p.factor in IS_FACTORS), None)
    result.first_factor = first.factor if first else None
    return result
