"""The dashboard's pure parts: display thinning, breakdown spans, figure builders, safety rule.

Thinning is checked against a plain-Python bucket loop and by the properties a reader of
a chart relies on (extremes, first and last point, spikes); spans against hand-built
alert timelines; figures by what they carry (data unchanged, shapes where the spans
are); the write permission rule case by case.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import charts
from dashboard.downsample import bucket_columns, minmax_downsample
from dashboard.marks import (
    Span,
    action_marks,
    alert_marks,
    breakdown_spans,
    health,
    limit_spans,
    merge_spans,
)
from dashboard.settings import is_loopback, settings_from_env, write_permission
from monitor.records import Action, Alert

# ----------------------------------------------------------------------------- thinning


def reference_minmax(y: list[float], n_buckets: int) -> set[int]:
    """Plain loop: per bucket, the first index of the min and of the max (NaN skipped)."""
    n = len(y)
    bounds = [round(i * n / n_buckets) for i in range(n_buckets + 1)]
    keep = {0, n - 1}
    for b in range(n_buckets):
        idx = range(bounds[b], bounds[b + 1])
        finite = [i for i in idx if not math.isnan(y[i])]
        if not finite:
            keep.add(bounds[b])
            continue
        keep.add(min(finite, key=lambda i: (y[i], i)))
        keep.add(min(finite, key=lambda i: (-y[i], i)))
    return keep


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(float("nan"))), min_size=30, max_size=400),
    st.integers(6, 40),
)
def test_minmax_matches_a_plain_loop(values, max_points):
    y = np.array(values)
    x = np.arange(len(y)) * 3
    xs, ys = minmax_downsample(x, y, max_points)
    if len(y) <= max_points:
        assert np.array_equal(xs, x)
        return
    keep = sorted(reference_minmax(values, (max_points - 2) // 2))
    assert xs.tolist() == [3 * i for i in keep]
    assert np.array_equal(ys, y[keep], equal_nan=True)
    assert len(xs) <= max_points + 2


def test_minmax_keeps_extremes_spikes_ends_and_gaps():
    rng = np.random.default_rng(1)
    y = rng.normal(size=100_000)
    y[31_337] = 50.0  # a one-step spike
    y[77_777] = -60.0
    y[50_000:50_400] = np.nan  # a gap longer than a bucket
    x = np.arange(100_000)
    xs, ys = minmax_downsample(x, y, 1500)
    assert len(xs) <= 1502 and np.all(np.diff(xs) > 0)
    assert np.nanmax(ys) == 50.0 and 31_337 in xs
    assert np.nanmin(ys) == -60.0 and 77_777 in xs
    assert xs[0] == 0 and xs[-1] == 99_999
    assert np.isnan(ys).any()  # the gap is still drawn as a gap
    # every kept point is a real (step, value) pair
    assert np.array_equal(ys, y[xs], equal_nan=True)


def test_minmax_short_series_untouched_and_bad_budget():
    x, y = np.arange(5), np.array([1.0, 2.0, np.nan, 4.0, 5.0])
    xs, ys = minmax_downsample(x, y, 10)
    assert xs is x or np.array_equal(xs, x)
    assert np.array_equal(ys, y, equal_nan=True)
    with pytest.raises(ValueError, match="max_points"):
        minmax_downsample(x, y, 3)


def test_bucket_columns_sum_max_mean_against_loops():
    rng = np.random.default_rng(2)
    steps = np.arange(10, 1010)
    z = rng.integers(0, 9, size=(4, 1000)).astype(float)
    z[1, 500] = np.nan
    s_sum, z_sum = bucket_columns(steps, z, 7, "sum")
    s_max, z_max = bucket_columns(steps, z, 7, "max")
    s_mean, z_mean = bucket_columns(steps, z, 7, "mean")
    bounds = np.linspace(0, 1000, 8).round().astype(int)
    for b in range(7):
        cols = z[:, bounds[b] : bounds[b + 1]]
        assert s_sum[b] == s_max[b] == s_mean[b] == steps[bounds[b]]
        assert np.array_equal(z_sum[:, b], np.nansum(cols, axis=1))
        assert np.array_equal(z_max[:, b], np.nanmax(cols, axis=1))
        assert np.allclose(z_mean[:, b], np.nanmean(cols, axis=1))
    # totals are conserved by summing (a histogram over a bucket of steps)
    assert z_sum.sum() == np.nansum(z)
    _, same_z = bucket_columns(steps[:5], z[:, :5], 7)
    assert np.array_equal(same_z, z[:, :5])
    with pytest.raises(ValueError):
        bucket_columns(steps, z[:, :10], 7)


# ----------------------------------------------------------------------------- marks


def alert(step, cleared=None, severity="warning", factor="train_inference", aid=1):
    return Alert(
        detector="level",
        severity=severity,
        metric="mismatch/kl_k1",
        value=0.04,
        baseline=0.001,
        window=50,
        factor=factor,
        message="KL up",
        remedy="turn on TIS",
        id=aid,
        step=step,
        time=0.0,
        cleared_step=cleared,
    )


def test_breakdown_spans_merge_overlaps_and_keep_the_worst_severity():
    alerts = [
        alert(10, cleared=15),  # steps 10..14
        alert(12, cleared=20, severity="critical", factor="routing", aid=2),  # 12..19
        alert(20, cleared=22, aid=3),  # touches: 20..21 joins
        alert(40, None, aid=4),  # open: to the last step
        alert(30, cleared=31, severity="info", aid=5),  # info is not a breakdown
        alert(50, cleared=50, aid=6),  # cleared at once: one step
    ]
    spans = breakdown_spans(alerts, last_step=60)
    assert spans == [
        Span(10, 21, "critical", ("train_inference", "routing")),
        Span(40, 60, "warning", ("train_inference",)),
    ]
    one = breakdown_spans([alert(5, None)], last_step=None)
    assert one == [Span(5, 5, "warning", ("train_inference",))]


def test_limit_spans_merges_the_closest_first():
    spans = [Span(s, s + 1, "warning", ("x",)) for s in (0, 10, 13, 30, 31, 100)]
    spans = merge_spans(spans, gap=1)  # 30..31 and 31..32 touch
    assert len(spans) == 5
    limited = limit_spans(spans, 3)
    assert limited == [  # gaps 2 and 9 closed first; 16 and 68 kept
        Span(0, 14, "warning", ("x",)),
        Span(30, 32, "warning", ("x",)),
        Span(100, 101, "warning", ("x",)),
    ]
    assert limit_spans(spans, 10) == spans
    # evenly spaced alerts: exactly max_spans spans, not one span over the whole run
    even = [
        Span(s, s + 20, "critical" if s == 500 else "warning", ("x",))
        for s in range(0, 10_000, 500)
    ]
    limited = limit_spans(even, 5)
    assert len(limited) == 5 and limited[0].start == 0 and limited[-1].end == 9520
    assert sum(sp.end - sp.start for sp in limited) < 10_000
    assert limited[0].severity == "critical"  # the worst severity survives the merge


def test_marks_and_health():
    a = alert(7, None, severity="critical")
    [m] = alert_marks([a])
    assert m.step == 7 and "mismatch/kl_k1 = 0.04" in m.text and "train_inference" in m.text
    acts = [
        Action(
            1, "set_is_correction", {"enabled": True}, "r", "dashboard", None, "pending", 5, 0.0
        ),
        Action(2, "rollback", {}, "r", "policy", 3, "applied", 6, 0.0, resolved_step=8),
    ]
    marks = action_marks(acts, last_step=9)
    assert [(m.step, m.level, m.label) for m in marks] == [
        (9, "pending", "set_is_correction"),
        (8, "applied", "rollback"),
    ]
    assert health([]) == "healthy"
    assert health([alert(1, severity="info")]) == "healthy"
    assert health([alert(1), alert(2, severity="critical")]) == "critical"


# ----------------------------------------------------------------------------- figures


def test_line_figure_carries_data_spans_and_marks():
    x = np.arange(100)
    y = np.linspace(1e-3, 1e-1, 100)
    spans = [Span(40, 60, "critical", ("routing",))]
    marks = alert_marks([alert(40, None)])
    fig = charts.line_figure("KL", {"mismatch/kl_k1": (x, y)}, spans=spans, marks=marks, log_y=True)
    data = fig.data[0]
    assert np.array_equal(data.x, x) and np.array_equal(data.y, y)
    [shape] = fig.layout.shapes
    assert (shape.x0, shape.x1, shape.fillcolor) == (39.5, 60.5, charts.SPAN_COLORS["critical"])
    assert shape.yref == "paper" and shape.layer == "below"
    alert_trace = fig.data[1]
    assert alert_trace.yaxis == "y2" and list(alert_trace.x) == [40]
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.range == (0, 1)


def test_distribution_figure_colours_log_share_per_step():
    edges = np.linspace(-1, 1, 5)  # 4 bins
    counts = np.array([[0, 1, 2, 1, 0, 0], [1, 0, 0, 0, 2, 1]])  # [S=2, bins + 2]
    fig = charts.distribution_figure(
        "log_rho",
        np.array([3, 4]),
        edges,
        counts,
        {"p50": (np.array([3, 4]), np.array([0.0, 0.5]))},
    )
    heat = fig.data[0]
    z = np.asarray(heat.z, dtype=float)  # [bins + 2, S]
    assert z.shape == (6, 2)
    assert z[2, 0] == pytest.approx(math.log10(2 / 4))
    assert z[0, 1] == pytest.approx(math.log10(1 / 4))  # underflow row
    assert np.isnan(z[0, 0])  # empty bins are blank, not -inf
    assert list(heat.y) == [-1.25, -0.75, -0.25, 0.25, 0.75, 1.25]
    assert fig.data[1].name == "p50"


def test_timeline_puts_alerts_on_their_factor_row():
    rows = [
        {"step": 3, "end": 8, "factor": "staleness", "severity": "warning", "text": "a"},
        {"step": 5, "end": 5, "factor": "routing", "severity": "critical", "text": "b"},
    ]
    acts = action_marks(
        [Action(1, "stop", {}, "r", "dashboard", None, "pending", 5, 0.0)], last_step=9
    )
    fig = charts.timeline_figure(rows, acts)
    markers = {t.name: t for t in fig.data if t.name}
    assert list(markers["alert: warning"].y) == ["staleness"]
    assert list(markers["alert: critical"].x) == [5]
    assert list(markers["action: pending"].x) == [9]
    assert list(fig.layout.yaxis.categoryarray)[-1] == "actions"


# ----------------------------------------------------------------------------- safety


@pytest.mark.parametrize(
    ("host", "loop"),
    [("127.0.0.1", True), ("127.0.1.5", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("", False), ("::", False),
     ("192.168.1.4", False), ("example.org", False)],
)  # fmt: skip
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_write_permission_rules():
    assert write_permission("127.0.0.1", None, None)[0]
    ok, why = write_permission("0.0.0.0", None, "anything")
    assert not ok and "without a token" in why
    ok, why = write_permission("10.0.0.2", "tok", None)
    assert not ok and "need the token" in why
    ok, why = write_permission("10.0.0.2", "tok", "tak")
    assert not ok and "wrong token" in why
    assert write_permission("10.0.0.2", "tok", "tok")[0]


def test_settings_from_env():
    env = {
        "MINIRL_RUNS_DIR": "/r",
        "MINIRL_DASHBOARD_HOST": "127.0.0.1",
        "MINIRL_DASHBOARD_TOKEN": "",
        "MINIRL_DASHBOARD_REFRESH_S": "0.1",
    }
    s = settings_from_env(env)
    assert (str(s.runs_dir), s.host, s.token, s.refresh_s) == ("/r", "127.0.0.1", None, 0.5)
    s = settings_from_env({})
    assert s.host == "" and not is_loopback(s.host)  # unknown bind: treated as exposed
