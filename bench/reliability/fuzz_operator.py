"""Fuzzed operator and integration inputs: dashboard action requests, the operator token,
the dashboard's import form, webhook URLs and payloads, and what `Monitor` is asked to log.

Strings include lone surrogates, NUL bytes, huge and non-finite numbers and nested
JSON; every input is accepted (and then round-trips through the store or the wire
format) or refused with one UserError naming it.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import strategies as st

from bench.reliability.fuzzing import Tally, fuzz
from monitor.remediation.actions import KINDS

_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "\ud800", "\x00", "a" * 5000, "../..", "run\nname", "é", "  "]),
)
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([10**400, -1, 0, 1, 2**63, 0.5, 5.0]),
)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_PARAM_KEYS = st.one_of(
    st.sampled_from(["enabled", "cap", "policy", "band", "eps_low", "eps_high", "mode", "n",
                     "factor", "lr", "step"]),
    _TEXT,
)  # fmt: skip


def _store(tmp: Path) -> Path:
    from monitor import Monitor

    run = tmp / "run"
    with Monitor(run) as mon:
        for step in range(1, 4):
            mon.log(step, {"reward/mean": 0.5})
    return run


def fuzz_action_requests(n: int) -> Tally:
    """The dashboard's request form: kind, params, reason, alert id -> `request_action`,
    then read back through `RunReader.actions`."""
    from monitor import RunReader, request_action

    hostile = st.tuples(
        st.one_of(st.sampled_from(KINDS), _TEXT),
        st.one_of(st.none(), st.dictionaries(_PARAM_KEYS, _VALUES, max_size=3), _VALUES),
        _TEXT,
        st.one_of(st.none(), st.integers(-(2**70), 2**70)),
    )
    plausible = st.tuples(  # what the form sends, with numbers anywhere in their range
        st.sampled_from(["scale_lr", "set_lr_cap", "set_mini_batches", "rollback", "stop"]),
        st.one_of(
            st.fixed_dictionaries({"factor": _NUMBERS}),
            st.fixed_dictionaries({"lr": _NUMBERS}),
            st.fixed_dictionaries({"n": _NUMBERS}),
            st.fixed_dictionaries({"step": _NUMBERS}),
            st.none(),
        ),
        st.text(min_size=1, max_size=30),
        st.none(),
    )
    requests = st.one_of(plausible, hostile)
    with tempfile.TemporaryDirectory(prefix="fuzz-actions-") as tmp:
        run = _store(Path(tmp))

        def check(req: tuple, tally: Tally) -> None:
            kind, params, reason, alert_id = req
            action = request_action(run, kind, params, reason, alert_id=alert_id)
            with RunReader(run) as reader:
                assert action.id in {a.id for a in reader.actions()}
            tally.count("requests stored")

        def names(req: tuple, message: str) -> bool:
            return any(w in message for w in ("action", "kind", "reason", "alert"))

        return fuzz("dashboard action requests", requests, check, n, names)


def fuzz_operator_token(n: int) -> Tally:
    """The operator's entered token against the configured one, on any bound address."""
    from dashboard.settings import settings_from_env, write_permission

    cases = st.tuples(
        st.one_of(st.sampled_from(["127.0.0.1", "", "0.0.0.0", "::1", "10.0.0.2"]), _TEXT),
        st.one_of(st.none(), _TEXT),
        st.one_of(st.none(), _TEXT),
        st.dictionaries(
            st.sampled_from(
                ["MINIRL_DASHBOARD_REFRESH_S", "MINIRL_DASHBOARD_HOST", "MINIRL_DASHBOARD_TOKEN"]
            ),
            _TEXT,
        ),
    )

    def check(case: tuple, tally: Tally) -> None:
        host, token, entered, env = case
        allowed, why = write_permission(host, token, entered)
        assert isinstance(allowed, bool) and why
        if allowed and token and not _loopback(host):
            assert entered == token
        settings = settings_from_env(env)
        assert math.isfinite(settings.refresh_s) or settings.refresh_s == math.inf

    return fuzz("operator token and settings", cases, check, n)


def _loopback(host: str) -> bool:
    from dashboard.settings import is_loopback

    return is_loopback(host)


def fuzz_import_form(n: int) -> Tally:
    """The dashboard's import tab: an uploaded file's name and bytes, the format choice."""
    from dashboard.analysis_page import _run_import

    cases = st.tuples(
        st.one_of(_TEXT, st.sampled_from(["", ".", "..", "/", "a/../b.jsonl", "x.tfevents"])),
        st.binary(max_size=200),
        st.sampled_from(["from the file name", "jsonl", "csv", "tensorboard", "wandb"]),
    )
    with tempfile.TemporaryDirectory(prefix="fuzz-import-form-") as tmp:
        out = Path(tmp) / "runs"
        out.mkdir()

        def check(case: tuple, tally: Tally) -> None:
            filename, data, fmt = case
            target = out / f"r{tally.tried}"
            ok, message = _run_import(filename, data, fmt, target)
            assert isinstance(ok, bool) and isinstance(message, str)
            tally.count("imported" if ok else "refused with a message")

        return fuzz("dashboard import form", cases, check, n)


def fuzz_webhook(n: int) -> Tally:
    """Webhook URLs (accepted or one UserError) and alert payloads (always strict JSON)."""
    from monitor.alerting.webhook import alert_payload, check_url

    fields = st.fixed_dictionaries(
        {},
        optional={
            k: _VALUES
            for k in (
                "detector",
                "severity",
                "metric",
                "value",
                "baseline",
                "message",
                "remedy",
                "step",
                "factor",
            )
        },
    )
    cases = st.tuples(
        st.one_of(_TEXT, st.sampled_from(["http://", "http://h:99999/", "https://h/x", "ftp://h"])),
        fields,
        _TEXT,
    )

    def check(case: tuple, tally: Tally) -> None:
        url, alert, run = case
        for fmt in ("json", "slack"):
            body = json.dumps(alert_payload(alert, run, fmt), allow_nan=False).encode()
            json.loads(body)
        tally.count("payloads encoded", 2)
        check_url(url)

    return fuzz("webhook URLs and payloads", cases, check, n, lambda v, m: "webhook url" in m)


def fuzz_monitor_writer(n: int) -> Tally:
    """What a training script hands `Monitor`: steps, metric names, values, event details."""
    from monitor import Monitor, RunReader

    names = st.one_of(st.from_regex(r"[a-z]{1,6}/[a-z_]{1,8}", fullmatch=True), _TEXT)
    logs = st.lists(
        st.tuples(
            st.one_of(
                st.integers(0, 10_000),
                st.integers(-5, 2**64),
                st.sampled_from([2**53, 2**53 + 1, 1.5, "3"]),
            ),
            st.dictionaries(names, st.one_of(st.floats(), _NUMBERS, _TEXT), max_size=3),
        ),
        min_size=1,
        max_size=4,
    )
    cases = st.tuples(logs, _TEXT, _VALUES)
    with tempfile.TemporaryDirectory(prefix="fuzz-monitor-") as tmp:

        def check(case: tuple, tally: Tally) -> None:
            entries, kind, detail = case
            with Monitor(Path(tmp) / f"r{tally.tried}") as mon:
                try:
                    mon.event(kind, {"detail": detail})
                    for step, scalars in entries:
                        mon.log(step, scalars)
                finally:
                    with RunReader(mon.store.path) as reader:
                        reader.summary()
                        reader.events()
                        tally.count("steps stored", len(reader.steps()))

        def names(case: tuple, message: str) -> bool:
            return any(w in message for w in ("step", "metric", "event", "detail"))

        return fuzz("Monitor.log and Monitor.event", cases, check, n, names)
