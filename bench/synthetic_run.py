"""A synthetic run for the dashboard benchmark: plausible series that break down midway.

`build_long` writes a long run (60 scalars, log ρ / log r histograms every step, alerts
and actions) through `RunStore` in 1000-step transactions: the file `Monitor` writes,
built faster. `live_writer` stands in for a trainer, writing step after step through
`Monitor.log` with its real detectors. The names are the trainer's own metric names
(mismatch, staleness, IS, approximation, routing, policy, reward, response, optimiser,
eval, perf) plus per-layer routing series.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np

from monitor import Monitor
from monitor.config import MonitorConfig
from monitor.store.histograms import bin_values, spec_for
from monitor.store.records import AlertDraft
from monitor.store.run_store import RunStore

# (level before the breakdown, level after): plausible values for a tiny model at small scale
LEVELS: dict[str, tuple[float, float]] = {
    "mismatch/kl_k1": (1e-3, 3e-2), "mismatch/kl_k2": (1e-3, 3e-2),
    "mismatch/kl_k3": (1e-3, 2.5e-2), "mismatch/ratio_mean": (1.0, 1.02),
    "mismatch/ratio_min": (0.5, 0.05), "mismatch/ratio_max": (2.0, 40.0),
    "mismatch/ratio_p01": (0.9, 0.6), "mismatch/ratio_p99": (1.1, 1.8),
    "mismatch/frac_outside_band": (1e-3, 3e-2), "mismatch/chi2_token": (0.01, 0.3),
    "mismatch/chi2_seq": (0.05, 1.5), "mismatch/ess": (0.98, 0.6),
    "mismatch/prob_corr": (0.999, 0.98), "mismatch/max_abs_prob_diff": (0.05, 0.3),
    "staleness/ratio_mean": (1.0, 1.0), "staleness/ratio_min": (0.8, 0.7),
    "staleness/ratio_max": (1.25, 1.4), "staleness/kl_k3": (1e-4, 2e-4),
    "staleness/mask_frac": (0.01, 0.02), "is/weight_mean": (1.0, 1.05),
    "is/weight_max": (3.0, 5.0), "is/trunc_frac": (1e-4, 5e-3),
    "approx/seq_residual": (0.02, 0.5), "approx/grad_cosine": (0.99, 0.7),
    "routing/mismatch_train_infer": (0.02, 0.08), "routing/mismatch_stale": (0.01, 0.015),
    "routing/tokens_any_layer_diff": (0.05, 0.2), "routing/overlap": (0.99, 0.96),
    "routing/load_cv": (0.3, 0.35), "policy/entropy": (1.2, 0.3), "reward/std": (0.4, 0.2),
    "reward/zero_adv_group_frac": (0.3, 0.7), "response/len_mean": (40.0, 60.0),
    "response/len_max": (128.0, 256.0), "response/trunc_frac": (0.01, 0.1),
    "optim/loss": (0.02, 0.05), "optim/grad_norm": (0.5, 5.0), "optim/lr": (3e-4, 3e-4),
    "perf/step_s": (0.5, 0.5), "perf/rollout_s": (0.2, 0.2), "perf/train_s": (0.25, 0.25),
    "perf/diag_s": (0.02, 0.02), "perf/tokens_per_s": (5000.0, 5000.0),
}  # fmt: skip
OUTCOME = ("reward/mean", "reward/acc", "eval/acc")
"""Shaped by `synthetic` itself: learning, then the collapse."""
LAYERS = [
    f"routing/{pair}/layer{i}"
    for pair in ("mismatch_train_infer", "mismatch_stale")
    for i in range(4)
]
CANONICAL = [*LEVELS, *OUTCOME]
NAMES = CANONICAL + LAYERS + [f"extra/m{i}" for i in range(60 - len(CANONICAL) - len(LAYERS))]


def synthetic(step: np.ndarray, rng: np.random.Generator, breakdown: int) -> dict[str, np.ndarray]:
    """Plausible series (5 % log-normal noise): learning, then at `breakdown` the
    train-inference mismatch jumps, routing flips in layer 3, and reward collapses."""
    n = len(step)
    after = step >= breakdown
    noise = lambda: np.exp(rng.normal(0, 0.05, n))  # noqa: E731
    out = {name: np.abs(rng.normal(1.0, 0.05, n)) for name in NAMES}
    for name, (before, broken) in LEVELS.items():
        out[name] = np.where(after, broken, before) * noise()
    out["optim/lr"] = np.full(n, 3e-4)
    learned = 0.2 + 0.5 * (1 - np.exp(-step / max(1.0, breakdown / 4)))
    out["reward/mean"] = np.clip(np.where(after, 0.15, learned) + rng.normal(0, 0.02, n), 0, 1)
    out["reward/acc"] = out["reward/mean"]
    out["eval/acc"] = np.where(step % 10 == 0, out["reward/mean"] * 0.9, np.nan)
    for pair, scale in (("mismatch_train_infer", 1.0), ("mismatch_stale", 0.5)):
        for i in range(4):
            broken = 0.25 if i == 3 else 0.03
            out[f"routing/{pair}/layer{i}"] = scale * np.where(after, broken, 0.015) * noise()
    return out


def _alert(detector: str, severity: str, metric: str, factor: str, message: str, remedy: str):
    def write(store: RunStore, step: int, series: dict, i: int) -> None:
        value = float(series[metric][i]) if metric in series else float("nan")
        draft = AlertDraft(
            detector, severity, metric, value, float("nan"), 50, factor, message, remedy
        )
        store.insert_alert(step, draft, time.time())

    return write


def _clear(detector: str, metric: str):
    return lambda store, step, series, i: store.clear_alerts(step, detector, metric)


def _action(kind: str, params: dict, reason: str, source: str, outcome: str | None):
    def write(store: RunStore, step: int, series: dict, i: int) -> None:
        action = store.insert_action(kind, params, reason, source, None, time.time())
        if outcome:
            store.resolve_action(action.id, "applied", outcome, time.time())

    return write


def alert_schedule(steps: int, breakdown: int) -> dict[int, list]:
    """A plausible history: three short transient warnings, then at the breakdown the
    mismatch and routing alerts (still open at the end), the policy's TIS action, a
    learning-rate cut and an operator's rollback request left pending."""
    kl = (
        "level",
        "mismatch/kl_k1",
        "train_inference",
        "mismatch KL k1 above its baseline",
        "turn on token IS correction (TIS, cap 5)",
    )
    rt = (
        "level",
        "routing/mismatch_train_infer",
        "routing",
        "routing flips up",
        "routing replay R3 (off-policy ≥ 4×) or R2",
    )
    sched: dict[int, list] = {}

    def at(step: int, what) -> None:
        sched.setdefault(min(step, steps - 1), []).append(what)

    for start in (int(steps * 0.15), int(steps * 0.35), int(steps * 0.52)):
        at(start, _alert(kl[0], "warning", kl[1], kl[2], kl[3], kl[4]))
        at(start + max(5, steps // 600), _clear(kl[0], kl[1]))
    at(breakdown + 2, _alert(kl[0], "critical", kl[1], kl[2], kl[3], kl[4]))
    at(breakdown + 3, _alert(rt[0], "warning", rt[1], rt[2], rt[3], rt[4]))
    tis = {"enabled": True, "cap": 5.0}
    at(
        breakdown + 4,
        _action("set_is_correction", tis, "policy: KL high with IS off", "policy", "TIS on, cap 5"),
    )
    at(
        breakdown + 30,
        _alert(
            "drop",
            "critical",
            "reward/mean",
            "outcome",
            "reward fell by more than half of its gain",
            "roll back to the last healthy checkpoint",
        ),
    )
    at(
        breakdown + 40,
        _action(
            "scale_lr", {"factor": 0.5}, "policy: collapse under way", "policy", "lr 3e-4 -> 1.5e-4"
        ),
    )
    at(
        steps - 50,
        _action(
            "rollback",
            {"step": breakdown - 100},
            "operator: back to before the breakdown",
            "dashboard",
            None,
        ),
    )
    return sched


def build_long(run: Path, steps: int) -> float:
    """The long run through RunStore; returns the build time in seconds."""
    rng = np.random.default_rng(0)
    cfg = MonitorConfig()
    store = RunStore.open(run)
    t = time.perf_counter()
    breakdown = int(steps * 0.7)
    schedule = alert_schedule(steps, breakdown)
    with store.transaction():
        store.set_meta("started", True)
        store.insert_event(None, "start", {"pid": os.getpid()}, time.time())
    for lo in range(0, steps, 1000):
        step = np.arange(lo, min(lo + 1000, steps))
        series = synthetic(step, rng, breakdown)
        with store.transaction():
            for i, s in enumerate(step.tolist()):
                values = {k: float(v[i]) for k, v in series.items() if np.isfinite(v[i])}
                store.write_step(s, values, time.time())  # eval/acc only on eval steps
                for name, scale in (("log_rho", 0.1), ("log_r", 0.05)):
                    row = bin_values(rng.normal(0, scale, 256), spec_for(name, cfg.histograms))
                    store.write_histogram(s, name, row)
                for what in schedule.get(s, ()):
                    what(store, s, series, i)
        print(f"\r  built {step[-1] + 1:,}/{steps:,} steps", end="", flush=True)
    with store.transaction():
        store.insert_event(steps - 1, "close", {}, time.time())
    store.close()
    print()
    return time.perf_counter() - t


def live_writer(run: Path, stop: threading.Event, period_s: float, steps: list[int]) -> None:
    """A trainer stand-in through Monitor.log (real detectors): breaks down at step 60."""
    rng = np.random.default_rng(3)
    with Monitor(run, config={"bench": "dashboard"}, controls={"is_policy": "none"}) as mon:
        step = 0
        while not stop.is_set():
            series = synthetic(np.array([step]), rng, breakdown=60)
            values = {k: float(v[0]) for k, v in series.items() if np.isfinite(v[0])}
            scale = 0.1 if step < 60 else 0.6
            mon.log(
                step,
                values,
                {"log_rho": rng.normal(0, scale, 512), "log_r": rng.normal(0, 0.05, 512)},
            )
            if step == 75:
                mon.request_action(
                    "set_is_correction",
                    {"enabled": True, "cap": 5.0},
                    "bench: operator turns TIS on",
                    source="user",
                )
            if step == 78:
                for action in mon.pending_actions():
                    mon.resolve(action.id, "applied", "TIS on, cap 5")
            steps.append(step)
            step += 1
            stop.wait(period_s)
