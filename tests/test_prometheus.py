"""The Prometheus side: exporter over real HTTP, rules through promtool, a real server.

The rule unit tests are generated from MonitorConfig's levels (so they follow the
detectors), but what they expect — which alert, which severity, at which value — is
written here from the detectors' documented semantics (≥ for "high", ≤ for "low", one
severity at a time), not read back from the rule text.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
import yaml
from alert_factory import make_alert
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from torchless_cli import run_cli

from monitor.alerting.prometheus import PrometheusExporter
from monitor.alerting.rules import build_rules, rules_yaml
from monitor.config import MonitorConfig
from monitor.detectors.rules import LevelRule
from monitor.monitor import Monitor

R_NONFINITE = "roll back to the last healthy checkpoint and lower the learning rate"
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool missing: apt-get install -y prometheus"
)


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


# ------------------------------------------------------------------------------ exporter


def test_exporter_serves_scalars_and_alert_state_over_http():
    exporter = PrometheusExporter("run-a", port=0)
    try:
        assert exporter._server.server_address[0] == "127.0.0.1"
        exporter.observe(1, {"mismatch/kl_k1": 1e-3, "optim/loss": 0.5})
        exporter.observe(2, {"mismatch/kl_k1": 0.05, "optim/loss": math.nan}, [make_alert(step=2)])
        got = _scrape(exporter.port)
        metric = lambda name: got[("minirl_metric", (("name", name), ("run", "run-a")))]  # noqa: E731
        assert metric("mismatch/kl_k1") == 0.05  # the latest value, not the first
        assert math.isnan(metric("optim/loss"))
        assert got[("minirl_step", (("run", "run-a"),))] == 2
        open_key = (
            "minirl_alert_open",
            (
                ("detector", "train_inference_kl"),
                ("factor", "train_inference"),
                ("metric", "mismatch/kl_k1"),
                ("run", "run-a"),
                ("severity", "warning"),
            ),
        )
        assert got[open_key] == 1
        # escalation keeps one open series per (detector, metric)
        exporter.observe(3, {"mismatch/kl_k1": 0.2}, [make_alert(severity="critical", step=3)])
        got = _scrape(exporter.port)
        crit_key = (
            open_key[0],
            tuple(sorted({**dict(open_key[1]), "severity": "critical"}.items())),
        )
        assert got[open_key] == 0 and got[crit_key] == 1
        # clearing (an Alert with cleared_step, or clear()) zeroes it
        exporter.observe(
            4, {"mismatch/kl_k1": 1e-3}, [make_alert(severity="critical", cleared_step=4)]
        )
        assert _scrape(exporter.port)[crit_key] == 0
        total_key = (
            "minirl_alerts_total",
            (
                ("detector", "train_inference_kl"),
                ("factor", "train_inference"),
                ("run", "run-a"),
                ("severity", "critical"),
            ),
        )
        assert _scrape(exporter.port)[total_key] == 1
    finally:
        exporter.close()
    with pytest.raises(OSError):  # the server is really gone
        urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=2)


def test_exporters_have_their_own_registries():
    a, b = PrometheusExporter("a"), PrometheusExporter("b", registry=CollectorRegistry())
    a.observe(1, {"x": 1.0})
    b.observe(1, {"x": 2.0})
    assert a.registry.get_sample_value("minirl_metric", {"run": "a", "name": "x"}) == 1.0
    assert a.registry.get_sample_value("minirl_metric", {"run": "b", "name": "x"}) is None
    assert REGISTRY.get_sample_value("minirl_metric", {"run": "a", "name": "x"}) is None


def test_exporter_port_in_use_is_a_user_error():
    from core.errors import UserError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(UserError, match="cannot serve Prometheus metrics"):
            PrometheusExporter("r", port=sock.getsockname()[1])


# ------------------------------------------------------------------------------ rules


def _level_rules(config: MonitorConfig) -> dict[str, LevelRule]:
    return {
        f.name: getattr(config.detectors, f.name)
        for f in dataclasses.fields(config.detectors)
        if isinstance(getattr(config.detectors, f.name), LevelRule)
        and getattr(config.detectors, f.name).enabled
    }


def _camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_"))


def _fmt(value: float) -> str:
    """How Prometheus prints {{ $value }} (Go's strconv 'g' with shortest repr)."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _exp(alertname, severity, detector, rule, run, value, level):
    word = "above" if rule.direction == "high" else "below"
    return {
        "exp_labels": {
            "severity": severity,
            "detector": detector,
            "factor": rule.factor,
            "metric": rule.metric,
            "run": run,
            "name": rule.metric,
        },
        "exp_annotations": {
            "summary": f"{rule.metric} = {_fmt(value)} on run {run}, {word} the {severity} "
            f"level {level:g}",
            "remedy": rule.remedy,
        },
    }


def _rule_tests(config: MonitorConfig) -> dict:
    """promtool unit tests: per level rule, values below, at and beyond each level."""
    tests = []
    for detector, rule in _level_rules(config).items():
        high = rule.direction == "high"
        # a healthy value, the level exactly (≥ / ≤ must fire), then beyond it
        values = [
            rule.level * (0.5 if high else 2.0),
            rule.level,
            rule.level * (2.0 if high else 0.5),
        ]
        series = f'minirl_metric{{run="r1", name="{rule.metric}"}}'
        name = f"Minirl{_camel(detector)}"
        checks = []
        for minute, value in enumerate(values):
            exp = [_exp(name, rule.severity, detector, rule, "r1", value, rule.level)]
            checks.append(
                {"eval_time": f"{minute}m", "alertname": name, "exp_alerts": exp if minute else []}
            )
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": series, "values": " ".join(repr(v) for v in values)}],
                "alert_rule_test": checks,
            }
        )
    # non-finite: a critical-prefix metric and another one
    nonfinite = []
    for minute, (alertname, name, value, severity) in enumerate(
        [
            ("MinirlNonFiniteMetricCritical", "optim/loss", "NaN", "critical"),
            ("MinirlNonFiniteMetricCritical", "optim/loss", "+Inf", "critical"),
            ("MinirlNonFiniteMetricCritical", "optim/loss", "-Inf", "critical"),
            ("MinirlNonFiniteMetric", "perf/step_s", "NaN", "warning"),
        ],
        start=1,
    ):
        nonfinite.append(
            {
                "eval_time": f"{minute}m",
                "alertname": alertname,
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": severity,
                            "detector": "nonfinite",
                            "factor": "optimisation",
                            "run": "r1",
                            "name": name,
                        },
                        "exp_annotations": {
                            "summary": f"{name} is {value} on run r1",
                            "remedy": R_NONFINITE,
                        },
                    }
                ],
            }
        )
    nonfinite.append(
        {"eval_time": "0m", "alertname": "MinirlNonFiniteMetricCritical", "exp_alerts": []}
    )
    nonfinite.append({"eval_time": "0m", "alertname": "MinirlNonFiniteMetric", "exp_alerts": []})
    tests.append(
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'minirl_metric{run="r1", name="optim/loss"}',
                    "values": "1 NaN +Inf -Inf 1",
                },
                {"series": 'minirl_metric{run="r1", name="perf/step_s"}', "values": "1 1 1 1 NaN"},
            ],
            "alert_rule_test": nonfinite,
        }
    )
    # the monitor's own alerts are forwarded while open, with their labels
    labels = {
        "detector": "entropy_collapse",
        "metric": "policy/entropy",
        "severity": "critical",
        "factor": "optimisation",
        "run": "r1",
    }
    selector = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    tests.append(
        {
            "interval": "1m",
            "input_series": [{"series": f"minirl_alert_open{{{selector}}}", "values": "0 1 1 0"}],
            "alert_rule_test": [
                {"eval_time": "0m", "alertname": "MinirlMonitorAlert", "exp_alerts": []},
                {
                    "eval_time": "2m",
                    "alertname": "MinirlMonitorAlert",
                    "exp_alerts": [
                        {
                            "exp_labels": labels,
                            "exp_annotations": {
                                "summary": "monitor alert entropy_collapse (critical) on "
                                "policy/entropy, run r1; factor optimisation"
                            },
                        }
                    ],
                },
                {"eval_time": "3m", "alertname": "MinirlMonitorAlert", "exp_alerts": []},
            ],
        }
    )
    return {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}


def test_rules_cover_every_level_rule_with_the_config_levels():
    config = MonitorConfig()
    rules = {r["alert"]: r for r in build_rules(config)["groups"][0]["rules"]}
    level = config.detectors.mismatch_level
    assert rules["MinirlMismatchLevel"]["expr"] == (
        f'minirl_metric{{name="mismatch/kl_k1"}} >= {float(level.level)!r}'
    )
    assert rules["MinirlMismatchLevel"]["labels"]["severity"] == "info"
    assert rules["MinirlIsTruncation"]["labels"]["severity"] == "warning"
    assert {f"Minirl{_camel(d)}" for d in _level_rules(config)} <= set(rules)
    # a changed threshold flows into the rules: they cannot drift from the detectors
    tuned = MonitorConfig.from_dict({"detectors": {"mismatch_level": {"level": 0.25}}})
    tuned_rules = {r["alert"]: r for r in build_rules(tuned)["groups"][0]["rules"]}
    assert tuned_rules["MinirlMismatchLevel"]["expr"].endswith(">= 0.25")


@needs_promtool
@pytest.mark.prometheus
def test_promtool_checks_and_unit_tests_the_rules(tmp_path):
    for config in (
        MonitorConfig(),
        MonitorConfig.from_dict({"detectors": {"mismatch_level": {"level": 0.03}}}),
    ):
        (tmp_path / "rules.yml").write_text(rules_yaml(config))
        (tmp_path / "tests.yml").write_text(yaml.safe_dump(_rule_tests(config), sort_keys=False))
        check = subprocess.run(
            [PROMTOOL, "check", "rules", str(tmp_path / "rules.yml")],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert "SUCCESS" in check.stdout
        test = subprocess.run(
            [PROMTOOL, "test", "rules", str(tmp_path / "tests.yml")], capture_output=True, text=True
        )
        assert test.returncode == 0, test.stdout + test.stderr


def test_prometheus_rulesrun_cli(tmp_path):
    out = run_cli("prometheus-rules")
    assert out.returncode == 0, out.stderr
    assert out.stdout == rules_yaml()
    config = tmp_path / "run.yaml"
    config.write_text("monitor:\n  detectors:\n    is_truncation: {level: 0.5}\n")
    out = run_cli("prometheus-rules", "--config", str(config))
    assert out.returncode == 0, out.stderr
    assert 'minirl_metric{name="is/trunc_frac"} >= 0.5\n' in out.stdout
    config.write_text("monitor:\n  detectors:\n    is_truncation: {levle: 0.5}\n")
    out = run_cli("prometheus-rules", "--config", str(config))
    assert out.returncode == 2 and "levle" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("prometheus-rules", "--config", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "missing.yaml: no such file" in out.stderr


# ------------------------------------------------------------------------------ real server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.prometheus
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus missing: apt-get install -y prometheus")
def test_real_prometheus_scrapes_the_exporter_and_fires_an_alert(tmp_path):
    exporter = PrometheusExporter("e2e", port=0)
    (tmp_path / "rules.yml").write_text(rules_yaml())
    (tmp_path / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(tmp_path / "rules.yml")],
                "scrape_configs": [
                    {
                        "job_name": "minirl",
                        "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
                    }
                ],
            }
        )
    )
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    level = MonitorConfig().detectors.is_truncation
    mon = Monitor(tmp_path / "run", exporter=exporter)
    try:
        # a healthy stream through the real Monitor, then the share of tokens past the IS
        # cap jumps past its warning level for `persist` steps: Prometheus's own rule and
        # the forwarded monitor alert must fire
        for step in range(5):
            mon.log(step, {"is/trunc_frac": 1e-4, "reward/mean": 0.5})
        for step in range(5, 5 + level.persist):
            alerts = mon.log(step, {"is/trunc_frac": 2 * level.level, "reward/mean": 0.5})
        assert alerts and alerts[0].severity == "warning"
        wanted = {"MinirlIsTruncation", "MinirlMonitorAlert"}
        deadline, firing = time.monotonic() + 30, {}
        while time.monotonic() < deadline and set(firing) != wanted:
            time.sleep(0.5)
            try:
                url = f"http://127.0.0.1:{port}/api/v1/alerts"
                alerts = json.load(urllib.request.urlopen(url, timeout=2))["data"]["alerts"]
            except OSError:
                continue  # not up yet
            firing = {a["labels"]["alertname"]: a for a in alerts if a["state"] == "firing"}
        assert set(firing) == wanted, (tmp_path / "prometheus.log").read_text()[-2000:]
        rule = firing["MinirlIsTruncation"]
        assert rule["labels"]["run"] == "e2e" and rule["labels"]["severity"] == "warning"
        assert float(rule["value"]) == 2 * level.level
        forwarded = firing["MinirlMonitorAlert"]["labels"]
        assert forwarded["detector"] == "is_truncation" and forwarded["run"] == "e2e"
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()
        mon.close()  # closes the exporter too
