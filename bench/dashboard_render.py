"""Dashboard benchmark: time to first render of a 100k-step run; live refresh in a real browser.

    minirl bench dashboard [--steps 100000] [--store DIR] [--no-browser]

1. Builds a run of `--steps` steps × 60 scalars (DESIGN.md's canonical names plus
   per-layer routing series) with log ρ / log r histograms every step and a few hundred
   alerts and actions, through `RunStore` in 1000-step transactions (the file Monitor
   writes, built faster). `--store DIR` keeps it for the next time.
2. Streamlit AppTest (no browser): first render of each page with cold caches, a
   re-render with warm caches, and a refresh after one more step.
3. Headless Chromium on the served app (`start_dashboard`): time until the Live page of
   the long run shows its last step, and until every chart is drawn; screenshot
   bench/results/dashboard_100k.png.
4. A live run written through `Monitor.log` (real detectors) that breaks down midway,
   watched in the browser: how long a new step takes to appear, and a screenshot
   bench/results/dashboard_live.png.
Results go to bench/results/dashboard.md. Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench import REPO, RESULTS
from bench.browser import Browser
from dashboard.serve import dashboard_url, start_dashboard, wait_until_ready
from monitor import Monitor, RunReader
from monitor.config import MonitorConfig
from monitor.errors import UserError
from monitor.histograms import bin_values, spec_for
from monitor.records import AlertDraft
from monitor.store import RunStore

CANONICAL = [
    "mismatch/kl_k1", "mismatch/kl_k2", "mismatch/kl_k3", "mismatch/ratio_mean",
    "mismatch/ratio_min", "mismatch/ratio_max", "mismatch/ratio_p01", "mismatch/ratio_p99",
    "mismatch/frac_outside_band", "mismatch/chi2_token", "mismatch/chi2_seq", "mismatch/ess",
    "mismatch/prob_corr", "mismatch/max_abs_prob_diff", "staleness/ratio_mean",
    "staleness/ratio_min", "staleness/ratio_max", "staleness/kl_k3", "staleness/mask_frac",
    "is/weight_mean", "is/weight_max", "is/trunc_frac", "approx/seq_residual",
    "approx/grad_cosine", "routing/mismatch_train_infer", "routing/mismatch_stale",
    "routing/tokens_any_layer_diff", "routing/overlap", "routing/load_cv", "policy/entropy",
    "reward/mean", "reward/std", "reward/acc", "reward/zero_adv_group_frac",
    "response/len_mean", "response/len_max", "response/trunc_frac", "optim/loss",
    "optim/grad_norm", "optim/lr", "eval/acc", "perf/step_s", "perf/rollout_s",
    "perf/train_s", "perf/diag_s", "perf/tokens_per_s",
]  # fmt: skip
LAYERS = [f"routing/{pair}/layer{i}" for pair in ("mismatch_train_infer", "mismatch_stale")
          for i in range(4)]  # fmt: skip
NAMES = CANONICAL + LAYERS + [f"extra/m{i}" for i in range(60 - len(CANONICAL) - len(LAYERS))]
LAST_STEP = re.compile(r"last step (\d+)")


# (level before the breakdown, level after): plausible values at small scale (SCIENCE.md)
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
        draft = AlertDraft(detector, severity, metric, value, float("nan"), 50, factor,
                           message, remedy)  # fmt: skip
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
    kl = ("level", "mismatch/kl_k1", "train_inference", "mismatch KL k1 above its baseline",
          "turn on token IS correction (TIS, cap 5)")  # fmt: skip
    rt = ("level", "routing/mismatch_train_infer", "routing", "routing flips up",
          "routing replay R3 (off-policy ≥ 4×) or R2")  # fmt: skip
    sched: dict[int, list] = {}

    def at(step: int, what) -> None:
        sched.setdefault(min(step, steps - 1), []).append(what)

    for start in (int(steps * 0.15), int(steps * 0.35), int(steps * 0.52)):
        at(start, _alert(kl[0], "warning", kl[1], kl[2], kl[3], kl[4]))
        at(start + max(5, steps // 600), _clear(kl[0], kl[1]))
    at(breakdown + 2, _alert(kl[0], "critical", kl[1], kl[2], kl[3], kl[4]))
    at(breakdown + 3, _alert(rt[0], "warning", rt[1], rt[2], rt[3], rt[4]))
    tis = {"enabled": True, "cap": 5.0}
    at(breakdown + 4, _action("set_is_correction", tis, "policy: KL high with IS off", "policy",
                              "TIS on, cap 5"))  # fmt: skip
    at(breakdown + 30, _alert("drop", "critical", "reward/mean", "outcome",
                              "reward fell by more than half of its gain",
                              "roll back to the last healthy checkpoint"))  # fmt: skip
    at(breakdown + 40, _action("scale_lr", {"factor": 0.5}, "policy: collapse under way",
                               "policy", "lr 3e-4 -> 1.5e-4"))  # fmt: skip
    at(steps - 50, _action("rollback", {"step": breakdown - 100}, "operator: back to before "
                           "the breakdown", "dashboard", None))  # fmt: skip
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


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_apptest(runs: Path, name: str) -> list[tuple[str, float]]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ.update(MINIRL_RUNS_DIR=str(runs), MINIRL_DASHBOARD_HOST="127.0.0.1")
    app = str(REPO / "dashboard" / "app.py")
    rows = []
    st.cache_data.clear()
    dt, at = timed(lambda: AppTest.from_file(app, default_timeout=600).run())
    rows.append(("Runs page, first run (imports + cold caches)", dt))
    for page in ("live", "alerts", "analysis"):
        st.cache_data.clear()
        at.query_params["run"] = name
        dt, _ = timed(lambda p=page: at.switch_page(f"views/{p}.py").run())
        assert not at.exception, [e.value for e in at.exception]
        rows.append((f"{page} page, first render (cold caches)", dt))
        dt, _ = timed(lambda: at.run())
        rows.append((f"{page} page, re-render (warm caches)", dt))
    at.switch_page("views/live.py").run()
    figures = len(at.get("plotly_chart"))
    assert any("last step" in str(m.value) for m in at.markdown)
    rows.append((f"(live page draws {figures} charts)", float("nan")))
    return rows, figures


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def charts_ready(browser, expected: int) -> int:
    """Number of Plotly charts drawn once all `expected` are, else 0."""
    n = browser.eval("document.querySelectorAll('.js-plotly-plot').length") or 0
    skeletons = browser.eval("document.querySelectorAll('[data-testid=stSkeleton]').length")
    return n if n >= expected and not skeletons else 0


def bench_browser_long(
    runs: Path, name: str, steps: int, n_charts: int, tmp: Path
) -> list[tuple[str, float]]:
    port = free_port()
    proc = start_dashboard(runs, "127.0.0.1", port, log_file=tmp / "server-long.log")
    rows = []
    try:
        url = dashboard_url("127.0.0.1", port)
        dt, _ = timed(lambda: wait_until_ready(url, proc, timeout_s=120))
        rows.append(("server start (health check answers)", dt))
        with Browser(tmp / "profile-long", height=2400) as b:
            b.goto(url)  # warm-up load: the first load after a cold start can stay blank
            b.wait_for(lambda t: "Runs" in t, 60)
            t0 = time.perf_counter()
            b.goto(url + f"live?run={name}")
            shown = b.wait_for(lambda t: f"last step {steps - 1}" in t, 300)
            rows.append((f"browser: Live page shows 'last step {steps - 1}'",
                         time.perf_counter() - t0 if shown else float("nan")))  # fmt: skip
            drawn = b.wait_for(lambda _: charts_ready(b, n_charts), 300)
            rows.append((f"browser: all {drawn} charts drawn", time.perf_counter() - t0))
            time.sleep(1.0)
            b.screenshot(RESULTS / "dashboard_100k.png")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return rows


def live_writer(run: Path, stop: threading.Event, period_s: float, steps: list[int]) -> None:
    """A trainer stand-in through Monitor.log (real detectors): breaks down at step 60."""
    rng = np.random.default_rng(3)
    with Monitor(run, config={"bench": "dashboard"}, controls={"is_policy": "none"}) as mon:
        step = 0
        while not stop.is_set():
            series = synthetic(np.array([step]), rng, breakdown=60)
            values = {k: float(v[0]) for k, v in series.items() if np.isfinite(v[0])}
            scale = 0.1 if step < 60 else 0.6
            mon.log(step, values, {"log_rho": rng.normal(0, scale, 512),
                                   "log_r": rng.normal(0, 0.05, 512)})  # fmt: skip
            if step == 75:
                mon.request_action("set_is_correction", {"enabled": True, "cap": 5.0},
                                   "bench: operator turns TIS on", source="user")  # fmt: skip
            if step == 78:
                for action in mon.pending_actions():
                    mon.resolve(action.id, "applied", "TIS on, cap 5")
            steps.append(step)
            step += 1
            stop.wait(period_s)


def bench_browser_live(tmp: Path, query: str = "", label: str = "") -> list[tuple[str, float]]:
    runs = tmp / f"live-runs{label}"
    runs.mkdir()
    stop, written = threading.Event(), []
    thread = threading.Thread(target=live_writer, args=(runs / "live-demo", stop, 0.25, written))
    thread.start()
    port = free_port()
    proc = start_dashboard(runs, "127.0.0.1", port, refresh_s=2.0,
                           log_file=tmp / "server-live.log")  # fmt: skip
    rows = []
    try:
        url = dashboard_url("127.0.0.1", port)
        wait_until_ready(url, proc, timeout_s=120)
        with Browser(tmp / "profile-live", height=2400) as b:
            b.goto(url)
            b.wait_for(lambda t: "Runs" in t, 60)
            b.goto(url + "live?run=live-demo" + query)
            b.wait_for(lambda t: LAST_STEP.search(t), 120)
            lags = []
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                found = LAST_STEP.findall(b.text())
                if found and written:
                    lags.append((written[-1] - int(found[-1])) * 0.25)
                time.sleep(0.5)
            what = f"live run{label}: 'last step' behind the writer"
            rows.append((f"{what}, median", float(np.median(lags))))
            rows.append((f"{what}, max", float(np.max(lags))))
            if not query:
                b.wait_for(lambda _: charts_ready(b, 20), 120)
                time.sleep(1.0)
                b.screenshot(RESULTS / "dashboard_live.png")
    finally:
        stop.set()
        thread.join(timeout=30)
        proc.terminate()
        proc.wait(timeout=30)
    return rows


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl bench dashboard", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--store", type=Path, default=None, help="keep the long run here")
    p.add_argument("--no-browser", action="store_true")
    args = p.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="minirl-dashboard-bench-"))
    runs = args.store or tmp / "runs"
    name = f"long-{args.steps}"
    run = runs / name
    build_s = None
    if run.exists():
        with RunReader(run) as r:
            if r.last_step() != args.steps - 1:
                raise UserError(f"{run} holds another run; remove it or pick --store")
    else:
        build_s = build_long(run, args.steps)
    size_mb = (run / "store.sqlite").stat().st_size / 2**20
    load = os.getloadavg()[0]
    rows, n_charts = bench_apptest(runs, name)
    if not args.no_browser and shutil.which("chromium"):
        rows += bench_browser_long(runs, name, args.steps, n_charts, tmp)
        rows += bench_browser_live(tmp)
        rows += bench_browser_live(tmp, "&sections=Outcome", " (Outcome section only)")
    lines = [
        "# Dashboard benchmark (`minirl bench dashboard`)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs shared with other jobs (load "
        f"average {load:.1f} at the start), Python {platform.python_version()}.",
        f"Date: {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        f"Run: {args.steps:,} steps × {len(NAMES)} scalars, log ρ and log r histograms every "
        f"step, alerts and actions; {size_mb:.0f} MiB"
        + (f", built in {build_s:.0f} s through `RunStore`." if build_s else "."),
        "",
        "| what | time |",
        "|---|---|",
        *[f"| {what} | {'' if np.isnan(s) else f'{s:.2f} s'} |" for what, s in rows],
        "",
        "AppTest times are a Streamlit script run without a browser (the server's share of a "
        "render). Browser times include the server's run, the websocket transfer and Plotly "
        "drawing in headless Chromium (software rendering). Lines are thinned to ≤ 1500 "
        "points (min/max per bucket) and heat maps to ≤ 300 columns for display only.",
        "",
        "The live run's status line ('last step N') has its own fragment refreshed every "
        "2 s; the charts refresh every 5 s. In headless Chromium without a GPU on this "
        "shared 2-core machine, redrawing all ~23 charts keeps the browser's main thread "
        "busy, which delays the status line too; with fewer sections (`?sections=...` or "
        "the Sections pills) it keeps up. The server's share is the AppTest re-render.",
        "",
        "Screenshots: `dashboard_100k.png` (the long run), `dashboard_live.png` (a run being "
        "written, breaking down at step 60, an operator action applied at step 78).",
    ]
    out = RESULTS / "dashboard.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"-> {out}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0

