"""Every dashboard page under Streamlit's AppTest, on run stores written through `Monitor`.

Each test writes its own runs folder (tmp_path) with the real monitor (detectors on, so
alerts are the monitor's own) and points the app at it through the environment, as
`minirl dashboard` does. AppTest does not fire `run_every` timers: a refresh is a
second `.run()`. Operator actions are checked in the store with `RunReader` and picked
up by the run's own `Monitor`, as the trainer would.
"""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from stream_factory import IS_OFF, kl_jump
from streamlit.testing.v1 import AppTest

from dashboard.settings import ENV_HOST, ENV_RUNS_DIR, ENV_TOKEN
from monitor import Monitor, RunReader

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
TIMEOUT = 60


# ----------------------------------------------------------------------------- runs


def _step_values(step: int, collapse_at: int | None) -> dict[str, float]:
    """A run that learns; with `collapse_at`, mismatch KL jumps 15 steps before reward
    falls (the precursor the analysis must find)."""
    broken = collapse_at is not None and step >= collapse_at - 15
    falling = collapse_at is not None and step >= collapse_at
    reward = min(0.8, 0.2 + 0.02 * step)
    if falling:
        reward = max(0.05, 0.8 - 0.06 * (step - collapse_at))
    return {
        "reward/mean": reward,
        "reward/acc": reward,
        "mismatch/kl_k1": 0.04 if broken else 1e-3 * (1 + 0.01 * (step % 5)),
        "mismatch/kl_k3": 0.02 if broken else 5e-4 * (1 + 0.01 * (step % 3)),
        "routing/mismatch_train_infer": 0.01,
        "routing/mismatch_train_infer/layer0": 0.01,
        "routing/mismatch_train_infer/layer1": 0.3 if broken else 0.02,
        "policy/entropy": 1.0,
        "optim/grad_norm": 1.0 + 0.01 * (step % 7),
    }


def write_run(
    root: Path,
    name: str,
    steps: int,
    *,
    collapse_at: int | None = None,
    close: bool = True,
    eval_every: int = 10,
) -> Monitor:
    """Log `steps` steps (with log ρ / log r histograms) and return the Monitor."""
    rng = np.random.default_rng(0)
    mon = Monitor(root / name, config={"name": name}, controls={"is_policy": "none"})
    for step in range(steps):
        values = _step_values(step, collapse_at)
        if step % eval_every == 0:
            values["eval/acc"] = 0.1 + 0.001 * step
        mon.log(step, values, {"log_rho": rng.normal(0, 0.1, 64), "log_r": rng.normal(0, 0.05, 64)})
    if close:
        mon.close()
    return mon


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setenv(ENV_RUNS_DIR, str(root))
    monkeypatch.setenv(ENV_HOST, "127.0.0.1")
    monkeypatch.delenv(ENV_TOKEN, raising=False)
    return root


def app(page: str | None = None, run: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    if page is not None:
        if run is not None:
            at.query_params["run"] = run
        at.switch_page(f"views/{page}.py").run()
    return at


def no_traceback(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for kind in (at.error, at.warning, at.info, at.success) for e in kind]
    return "\n".join(map(str, parts))


def figures(at: AppTest) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def arr(value) -> np.ndarray:
    """A figure array as numbers: Plotly 7 sends numpy arrays as base64 typed arrays."""
    if isinstance(value, dict) and "bdata" in value:
        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return out.reshape(value["shape"]) if "shape" in value else out
    return np.asarray(value)


def widget(elements, label: str):
    return next(e for e in elements if e.label == label)


# ----------------------------------------------------------------------------- Runs


def test_runs_page_lists_status_outcome_and_health(runs: Path):
    write_run(runs, "healthy", 30)
    write_run(runs, "broken", 60, collapse_at=45)
    live = write_run(runs, "live", 12, close=False)
    try:
        at = app()
        no_traceback(at)
        rows = {r["run"]: r for r in at.dataframe[0].value.to_dict("records")}
        assert set(rows) == {"healthy", "broken", "live"}
        assert "finished" in rows["healthy"]["status"] and "live" in rows["live"]["status"]
        assert rows["healthy"]["last step"] == "29" and rows["live"]["last step"] == "11"
        assert rows["healthy"]["reward"] == f"{0.2 + 0.02 * 29:.3f}"
        # eval/acc is logged every 10 steps: the last finite value is step 20's
        assert rows["healthy"]["held-out acc"] == f"{0.1 + 0.001 * 20:.3f}"
        assert "healthy" in rows["healthy"]["health"]
        assert "critical" in rows["broken"]["health"] or "warning" in rows["broken"]["health"]
        assert rows["broken"]["alerts"] > 0
        # links into every page of every run
        assert len(at.get("page_link")) == 9
    finally:
        live.close()


def test_empty_and_missing_folder_give_a_message(runs: Path, monkeypatch: pytest.MonkeyPatch):
    at = app()
    no_traceback(at)
    assert "No runs in" in texts(at)
    for page in ("live", "alerts", "analysis"):
        at.switch_page(f"views/{page}.py").run()
        no_traceback(at)
        assert "No runs in" in texts(at)
    monkeypatch.setenv(ENV_RUNS_DIR, str(runs / "nope"))
    at = app()
    no_traceback(at)
    assert "does not exist" in texts(at)


def test_corrupt_store_is_named_with_its_reason(runs: Path):
    write_run(runs, "good", 5)
    (runs / "bad").mkdir()
    (runs / "bad" / "store.sqlite").write_bytes(b"this is not a database" * 100)
    at = app()
    no_traceback(at)
    rows = {r["run"]: r for r in at.dataframe[0].value.to_dict("records")}
    assert "unreadable" in rows["bad"]["status"]
    assert "not a readable minirl run store" in rows["bad"]["detail"]
    for page in ("live", "alerts"):
        at = app(page, run="bad")
        no_traceback(at)
        assert "cannot be read" in texts(at)


# ----------------------------------------------------------------------------- Live


def test_live_page_draws_panels_shading_marks_and_refreshes(runs: Path):
    mon = write_run(runs, "r", 60, collapse_at=45, close=False)
    try:
        at = app("live", run="r")
        no_traceback(at)
        assert "last step 59" in texts(at)
        figs = {f["layout"]["title"]["text"]: f for f in figures(at)}
        kl = figs["Mismatch KL(μ_old‖π_old)"]
        # data drawn exactly as stored (60 points: no thinning)
        k1 = next(t for t in kl["data"] if t.get("name") == "mismatch/kl_k1")
        assert len(arr(k1["y"])) == 60 and arr(k1["y"])[-1] == pytest.approx(0.04)
        # the breakdown the detectors flagged is shaded, on every time-series chart
        with RunReader(runs / "r") as reader:
            first_alert = min(a.step for a in reader.alerts() if a.severity != "info")
        for title, fig in figs.items():
            x0 = [s["x0"] for s in fig["layout"].get("shapes", ())]
            assert first_alert - 0.5 in x0, title
        assert any(t.get("name", "").startswith("alert:") for t in kl["data"])
        # routing per-layer heat map and the distributions over steps
        layers = figs["routing/mismatch_train_infer per layer"]["data"][0]
        assert layers["type"] == "heatmap" and layers["y"] == ["layer 0", "layer 1"]
        assert {"log_rho", "log_r"} <= set(figs)
        assert figs["log_rho"]["data"][0]["type"] == "heatmap"
        # a refresh (AppTest does not fire run_every) shows the steps logged since
        for step in range(60, 64):
            mon.log(step, _step_values(step, 45))
        at.run()
        no_traceback(at)
        assert "last step 63" in texts(at)
    finally:
        mon.close()


def write_remediated_run(root: Path, name: str, steps: int = 50) -> None:
    """A run as the demo writes one: a low ESS from step 1 (an info level), an induced
    incident at step 30 that makes it stale, the staleness precursor and the policy's
    action applied by the 'trainer', a rollback, and a χ² that spikes to 4e5 once."""
    rng = np.random.default_rng(0)
    mon = Monitor(root / name, controls={"clip": True, "mini_batches": 1}, remediation=True)
    for step in range(1, steps + 1):
        if step == 30:
            note = "induced incident at step 30: clipping switched off"
            mon.event("incident", {"kind": "set_clip", "note": note, "induced": True})
            mon.update_controls({"clip": False, "mini_batches": 1})
        noise = 1 + 0.05 * rng.standard_normal()
        values = {
            "reward/mean": 0.4 + 0.002 * step,
            "mismatch/kl_k1": -1.8e-5 * noise,  # k1 of one step can be negative
            "mismatch/kl_k3": 3.2e-4 * noise,
            "mismatch/ess": 0.3 * noise,
            "mismatch/chi2_token": 4e5 if step == steps - 2 else (0.0 if step == 3 else 0.01),
            "staleness/kl_k3": (0.02 if step >= 30 else 1e-4) * noise,
        }
        if step % 10 == 0:
            values["eval/acc"] = 0.4 if step < 40 else 0.45
        mon.log(step, values)
        for action in mon.pending_actions():
            mon.resolve(action.id, "applied", "clip: False -> True")
            mon.event("rollback", {"step": step, "to_step": 20, "eval_acc_after": 0.4})
    mon.close()


def test_live_page_tells_what_happened_and_marks_it_where_it_happened(runs: Path):
    write_remediated_run(runs, "demo")
    at = app("live", run="demo")
    no_traceback(at)
    text = texts(at)
    assert "ⓘ levels (info: shown, never acted on): mismatch/ess" in text
    assert "**induced incident** (scripted): clipping switched off" in text
    assert "◆ action **set_clip**" in text and "⟲ **rolled back to step 20**" in text
    assert "back at its pre-episode level (within noise 0.01 of its best 0.400, at step 30)" in text
    tiles = {m.label: m.value for m in at.metric}
    assert "mismatch/kl_k1" not in tiles  # the tile shows k3, never a negative KL
    assert re.fullmatch(r"3\.\de-4", tiles["mismatch/kl_k3"])  # 3.2e-4, not 0.000… or cut
    figs = {f["layout"]["title"]["text"]: f for f in figures(at)}
    chi2 = next(f for t, f in figs.items() if t.startswith("IS weights: χ²"))
    assert chi2["layout"]["yaxis"]["type"] == "log"  # the late 4e5 does not flatten it
    reward = figs["Reward and accuracy"]["layout"]
    labels = {a["text"] for a in reward["annotations"]}
    assert labels == {"induced incident", "rolled back to step 20"}
    [shade] = [s for s in reward["shapes"] if s["type"] == "rect"]
    assert shade["x0"] > 29  # the info level since step 1 is not shaded


def test_live_page_thins_long_runs_for_display_only(runs: Path):
    mon = Monitor(runs / "long")
    for step in range(5000):
        mon.log(step, {"reward/mean": 1.0 if step == 1234 else 0.5})
    mon.close()
    at = app("live", run="long")
    no_traceback(at)
    fig = next(f for f in figures(at) if f["layout"]["title"]["text"] == "Reward and accuracy")
    x, y = arr(fig["data"][0]["x"]), arr(fig["data"][0]["y"])
    assert len(y) <= 1502
    assert y.max() == 1.0 and 1234 in x  # the spike survives thinning


def test_sections_can_be_preselected_in_the_url(runs: Path):
    write_run(runs, "r", 10)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.query_params.update(run="r", sections="Routing,nonsense")
    at.switch_page("views/live.py").run()
    no_traceback(at)
    titles = {f["layout"]["title"]["text"] for f in figures(at)}
    assert titles and all("outing" in t for t in titles), titles


def test_run_without_steps_says_it_is_waiting(runs: Path):
    mon = Monitor(runs / "fresh")
    try:
        at = app("live", run="fresh")
        no_traceback(at)
        assert "no steps yet" in texts(at)
    finally:
        mon.close()


# ----------------------------------------------------------------------------- Alerts


def test_alerts_page_shows_timeline_evidence_and_factor(runs: Path):
    write_run(runs, "r", 60, collapse_at=45)
    with RunReader(runs / "r") as reader:
        alerts = reader.alerts()
    at = app("alerts", run="r")
    no_traceback(at)
    table = at.dataframe[0].value
    assert len(table) == len(alerts) > 0
    kl = table[table["metric"] == "mismatch/kl_k1"].iloc[-1]
    assert kl["blamed factor"] == "train_inference"
    assert float(kl["value"]) == pytest.approx(0.04, rel=1e-3) and kl["remedy"]
    timeline = figures(at)[0]
    assert "train_inference" in {y for t in timeline["data"] for y in t.get("y", ()) if y}


def test_alerts_page_audits_actions_incidents_and_rollbacks(runs: Path):
    write_remediated_run(runs, "demo")
    at = app("alerts", run="demo")
    no_traceback(at)
    actions = at.dataframe[1].value
    [clip] = actions[actions["kind"] == "set_clip"].to_dict("records")
    assert clip["status"] == "applied" and clip["source"] == "policy"
    assert "clipping is off: turn it on" in clip["reason"] and clip["trainer said"]
    events = at.dataframe[2].value.to_dict("records")
    assert [e["event"] for e in events] == ["incident", "rollback"]
    assert events[0]["what"].startswith("induced incident at step 30: clipping switched off")
    assert "checkpoint of step 20" in events[1]["what"]
    timeline = figures(at)[0]
    assert {t.get("name") for t in timeline["data"]} >= {"induced incident", "rollback"}


def test_alerts_page_shows_the_advice_the_policy_holds_back(runs: Path):
    """IS correction off and a training-inference precursor: the policy only advises
    (a breakdown would apply it), and the advice is on the Alerts page."""
    mon = Monitor(runs / "advice", controls=IS_OFF, remediation=True)
    for step, metrics in kl_jump():
        mon.log(step, metrics)
    assert mon.pending_actions() == []
    mon.close()
    at = app("alerts", run="advice")
    no_traceback(at)
    events = at.dataframe[-1].value.to_dict("records")
    [held] = [e for e in events if e["event"] == "remediation_skipped"]
    assert held["what"] == (
        "not applied automatically: set_is_correction (cap=5.0, enabled=True): IS correction "
        "is off: recommended on; applied automatically only at a breakdown"
    )


def _request(at: AppTest, kind: str, **fields) -> AppTest:
    widget(at.selectbox, "Action kind").set_value(kind).run()
    for label, value in fields.items():
        for group in (at.number_input, at.checkbox, at.text_input, at.selectbox):
            match = [w for w in group if w.label == label]
            if match:
                match[0].set_value(value)
                break
        else:
            raise KeyError(label)
    widget(at.button, "Request action").click().run()
    return at


def test_operator_action_is_written_pending_and_applied_by_the_trainer(runs: Path):
    mon = write_run(runs, "r", 20, close=False)
    try:
        at = _request(app("alerts", run="r"), "set_is_correction", **{"cap (optional)": 5.0})
        no_traceback(at)
        assert "is pending" in texts(at)
        pending = mon.pending_actions()  # what the trainer sees at its next step boundary
        assert [(a.kind, a.params, a.source) for a in pending] == [
            ("set_is_correction", {"enabled": True, "cap": 5.0}, "dashboard")
        ]
        mon.resolve(pending[0].id, "applied", "TIS on, cap 5")
        mon.log(20, _step_values(20, None))
        at.run()
        actions = at.dataframe[-1].value
        assert actions.iloc[0]["status"] == "applied"
        assert actions.iloc[0]["trainer said"] == "TIS on, cap 5"
    finally:
        mon.close()


def test_every_requestable_action_kind_has_a_form(runs: Path):
    """The kind list comes from the monitor's action table: a kind without a form was a
    KeyError on the page. An lr cap and a rollout weight format are requested through it."""
    from dashboard.alerts_page import FORMS
    from monitor.remediation.actions import KINDS

    assert {k for k in KINDS if k != "advice"} <= set(FORMS)
    write_run(runs, "r", 10)
    at = _request(app("alerts", run="r"), "set_lr_cap", lr=3e-6)
    no_traceback(at)
    at = _request(at, "set_rollout_quant", weight_quant="fp8_e4m3")
    no_traceback(at)
    with RunReader(runs / "r") as reader:
        asked = [(a.kind, a.params, a.status) for a in reader.actions()]
    assert asked == [
        ("set_lr_cap", {"lr": 3e-6}, "pending"),
        ("set_rollout_quant", {"weight_quant": "fp8_e4m3"}, "pending"),
    ]


def test_rollback_and_stop_need_confirmation(runs: Path):
    write_run(runs, "r", 10)
    at = _request(app("alerts", run="r"), "stop")
    assert "to confirm" in texts(at)
    with RunReader(runs / "r") as reader:
        assert reader.actions() == []
    at = _request(at, "rollback", **{"step (optional)": 4, "Yes, rollback this run": True})
    no_traceback(at)
    with RunReader(runs / "r") as reader:
        [action] = reader.actions()
    assert (action.kind, action.params, action.status) == ("rollback", {"step": 4}, "pending")


def test_bad_action_params_get_the_monitors_message(runs: Path):
    write_run(runs, "r", 10)
    at = _request(app("alerts", run="r"), "scale_lr", factor=20.0)
    no_traceback(at)
    assert "factor must be in (0, 10]" in texts(at)
    with RunReader(runs / "r") as reader:
        assert reader.actions() == []


def _forged_click(at) -> None:
    """The disabled Request button, enabled and clicked by a forged client: the server
    must refuse the request as well."""
    button = widget(at.button, "Request action")
    assert button.disabled
    button.proto.disabled = False
    button.click().run()


def test_actions_refused_when_exposed_without_token(runs: Path, monkeypatch: pytest.MonkeyPatch):
    write_run(runs, "r", 10)
    monkeypatch.setenv(ENV_HOST, "0.0.0.0")
    at = app("alerts", run="r")
    assert "without a token" in texts(at)
    _forged_click(at)
    no_traceback(at)
    assert "without a token" in texts(at)
    with RunReader(runs / "r") as reader:
        assert reader.actions() == []


def test_actions_with_token_when_exposed(runs: Path, monkeypatch: pytest.MonkeyPatch):
    write_run(runs, "r", 10)
    monkeypatch.setenv(ENV_HOST, "0.0.0.0")
    monkeypatch.setenv(ENV_TOKEN, "s3cret")
    at = app("alerts", run="r")
    widget(at.text_input, "Operator token").set_value("wrong").run()
    assert "wrong token" in texts(at)
    _forged_click(at)
    with RunReader(runs / "r") as reader:
        assert reader.actions() == []
    widget(at.text_input, "Operator token").set_value("s3cret").run()
    _request(at, "stop", **{"Yes, stop this run": True})
    with RunReader(runs / "r") as reader:
        assert [a.kind for a in reader.actions()] == ["stop"]


# ----------------------------------------------------------------------------- Analysis


def test_analysis_page_shows_onset_precursors_and_first_factor(runs: Path):
    from monitor.analysis.analyze import analyze_run

    write_run(runs, "crash", 120, collapse_at=80)
    expected = analyze_run(str(runs / "crash"))
    assert expected.onset is not None  # the fixture collapses by the monitor's definition
    at = app("analysis", run="crash")
    no_traceback(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["onset step"] == str(expected.onset.step)
    assert metrics["factor that broke first"] == expected.first_factor == "train_inference"
    table = at.dataframe[0].value
    assert list(table["metric"]) == [p.metric for p in expected.precursors]
    assert "mismatch/kl_k1" in set(table["metric"])


def test_analysis_page_calls_a_divergence_a_collapse(runs: Path):
    mon = write_run(runs, "nan", 60, close=False)
    for step in (60, 61):  # the reward still up, the loss and gradient norm NaN to the end
        mon.log(step, {**_step_values(step, None), "optim/grad_norm": math.nan})
    mon.close()
    at = app("analysis", run="nan")
    no_traceback(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["collapsed"] == "diverged" and metrics["onset step"] == "60"


def test_analysis_compare_overlays_runs_on_one_axis(runs: Path):
    write_run(runs, "a", 30)
    write_run(runs, "b", 40, collapse_at=30)
    at = app("analysis", run="a")
    no_traceback(at)
    overlay = next(
        f
        for f in figures(at)
        if f["layout"]["title"]["text"] == "reward/mean" and len(f["data"]) == 2
    )
    assert {t["name"] for t in overlay["data"]} == {"a", "b"}
    assert {len(arr(t["x"])) for t in overlay["data"]} == {30, 40}


def test_import_of_a_foreign_log_creates_a_run(runs: Path, monkeypatch: pytest.MonkeyPatch):
    log = "\n".join(
        json.dumps({"step": s, "train/reward_mean": 0.1 * s, "loss": 1.0 / (s + 1)})
        for s in range(30)
    )
    write_run(runs, "ours", 5)
    at = app("analysis", run="ours")
    at.file_uploader[0].set_value(("peer_log.jsonl", log.encode(), "application/json"))
    at.run()
    assert widget(at.text_input, "New run name").value == "peer_log"
    widget(at.button, "Import").click().run()
    no_traceback(at)
    assert "imported 30 steps" in texts(at)
    with RunReader(runs / "peer_log") as reader:
        assert reader.last_step() == 29
        assert len(reader.metric_names()) >= 2
    # the same name again is refused, nothing overwritten
    widget(at.button, "Import").click().run()
    assert "already exists" in texts(at)
    # exposed without a token: refused
    monkeypatch.setenv(ENV_HOST, "0.0.0.0")
    at = app("analysis", run="ours")
    assert widget(at.button, "Import").disabled


def test_long_distributions_are_read_every_kth_step(tmp_path: Path):
    from dashboard.data import histogram_stride, load_histograms
    from monitor.config import MonitorConfig
    from monitor.store.histograms import bin_values, spec_for
    from monitor.store.run_store import RunStore

    assert histogram_stride(99_999, 300) == 83 and histogram_stride(1_000, 300) is None
    spec = spec_for("log_rho", MonitorConfig().histograms)
    store = RunStore.open(tmp_path / "r")
    rng = np.random.default_rng(0)
    with store.transaction():
        for step in range(3600):
            store.write_step(step, {"x": 1.0}, 0.0)
            if step % 2 == 0 or step < 600:  # every step early on, then every other one
                store.write_histogram(step, "log_rho", bin_values(rng.normal(0, 1, 32), spec))
            if step % 2 == 1:  # odd steps only: an even stride reads none of them
                store.write_histogram(step, "log_r", bin_values(rng.normal(0, 1, 32), spec))
    store.close()
    h = load_histograms(str(tmp_path / "r"), "log_rho", 3599, 300, 1500, ("t",))
    with RunReader(tmp_path / "r") as reader:
        full = reader.histograms("log_rho")
    sampled = full.steps % 3 == 0  # stride 3600 // 1200
    assert (
        len(h.steps) <= 300 and h.counts.sum() == full.counts[sampled].sum() == 32 * sampled.sum()
    )
    # quantile lines keep the extremes of the steps read
    assert np.nanmax(h.quantiles["p99"][1]) == np.nanmax(full.quantiles["p99"][sampled])
    # a stride that misses the logged steps falls back to reading them all
    h = load_histograms(str(tmp_path / "r"), "log_r", 2399, 300, 1500, ("u",))
    assert h.counts.sum() == 32 * 1800


def test_alerts_page_shows_a_fork_experiment(runs: Path):
    write_remediated_run(runs, "forked")
    mon = Monitor(runs / "forked", resume=True)
    mon.event(
        "fork_experiment",
        {
            "step": 45,
            "from_step": 20,
            "k": 5,
            "candidates": [
                {"name": "policy fix", "actions": [], "score": 0.30, "eval_acc": 0.34, "alerts": 2},
                {
                    "name": "policy fix + lr halved",
                    "actions": [["scale_lr", {"factor": 0.5}]],
                    "score": 0.41,
                    "eval_acc": 0.41,
                    "alerts": 0,
                },
            ],
            "chosen": "policy fix + lr halved",
            "cost_steps": 10,
        },
    )
    mon.close()
    at = app("alerts", run="forked")
    no_traceback(at)
    assert "Remedies tried on forks" in texts(at)
    rows = at.dataframe[-1].value.to_dict("records")
    assert [(r["remedy"], r["chosen"]) for r in rows] == [
        ("policy fix", ""),
        ("policy fix + lr halved", "✓"),
    ]
    assert rows[1]["changes"] == "scale_lr (factor=0.5)" and rows[1]["score"] == 0.41
    events = at.dataframe[2].value.to_dict("records")
    [fx] = [e for e in events if e["event"] == "fork_experiment"]
    assert "2 remedies × 5 steps" in fx["what"] and "chose policy fix + lr halved" in fx["what"]
