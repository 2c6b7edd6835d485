"""The dashboard's pure parts: display thinning, figure builders, safety rule.

Thinning is checked against a plain-Python bucket loop and by the properties a reader of
a chart relies on (extremes, first and last point, spikes); figures by what they carry
(data unchanged, shapes where the spans are); the write permission rule case by case.
Episodes and marks: tests/test_dashboard_marks.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboard import charts
from dashboard.downsample import bucket_columns, minmax_downsample
from dashboard.marks import Mark, Span, action_marks, incident_marks, rollback_marks
from dashboard.overlays import SPAN_COLORS
from dashboard.settings import is_loopback, settings_from_env, write_permission
from monitor.store.records import Action, Event

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


# ----------------------------------------------------------------------------- figures


def test_line_figure_carries_data_spans_and_marks():
    x = np.arange(100)
    y = np.linspace(1e-3, 1e-1, 100)
    spans = [Span(40, 60, "critical", ("routing",), "routing")]
    marks = [Mark(40, "alert", "warning", "routing", "episode")]
    fig = charts.line_figure("KL", {"mismatch/kl_k1": (x, y)}, spans=spans, marks=marks, log_y=True)
    data = fig.data[0]
    assert np.array_equal(data.x, x) and np.array_equal(data.y, y)
    [shape] = fig.layout.shapes
    assert (shape.x0, shape.x1, shape.fillcolor) == (39.5, 60.5, SPAN_COLORS["critical"])
    assert shape.yref == "paper" and shape.layer == "below"
    alert_trace = fig.data[1]
    assert alert_trace.yaxis == "y2" and list(alert_trace.x) == [40]
    assert list(alert_trace.text) == ["routing"]  # the episode's blamed factor, on the chart
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
    events = [
        Event(1, 2, "incident", {"note": "induced incident at step 3: clipping switched off"}),
        Event(2, 6, "rollback", {"to_step": 0}),
    ]
    run_marks = [*incident_marks(events), *rollback_marks(events)]
    fig = charts.timeline_figure(rows, acts, run_marks, last_step=9)
    markers = {t.name: t for t in fig.data if t.name}
    assert list(markers["alert: warning"].y) == ["staleness"]
    assert list(markers["alert: critical"].x) == [5]
    assert list(markers["action: pending"].x) == [9]
    assert list(markers["induced incident"].x) == [2.5]
    assert list(markers["induced incident"].text) == ["induced"]
    assert list(markers["rollback"].text) == ["rolled back to step 0"]
    assert list(fig.layout.yaxis.categoryarray)[-2:] == ["actions", charts.EVENTS_ROW]
    assert {s.x0 for s in fig.layout.shapes} == {2.5, 6.5}  # lines across every row
    assert tuple(fig.layout.xaxis.range) == (-0.5, 10)  # the whole run, not only the alerts


# ----------------------------------------------------------------------------- safety


@pytest.mark.parametrize(
    ("host", "loop"),
    [
        ("127.0.0.1", True),
        ("127.0.1.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("", False),
        ("::", False),
        ("192.168.1.4", False),
        ("example.org", False),
    ],
)
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
