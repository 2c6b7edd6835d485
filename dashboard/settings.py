"""What the served app knows about itself: runs folder, bound address, operator token.

`minirl dashboard` (serve.py) passes these to the Streamlit process through environment
variables, never through the URL or the command line, so the token does not show up in
browser history or `ps`. `write_permission` is the one rule for every write the app can
make (operator actions, imports): allowed on a loopback address; on any other address
only with a configured token that the operator has entered. Pure Python, no Streamlit.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_RUNS_DIR = "MINIRL_RUNS_DIR"
ENV_HOST = "MINIRL_DASHBOARD_HOST"
ENV_TOKEN = "MINIRL_DASHBOARD_TOKEN"
ENV_REFRESH_S = "MINIRL_DASHBOARD_REFRESH_S"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501
DEFAULT_REFRESH_S = 2.0
MAX_POINTS = 1500
"""Points per line drawn (min/max buckets beyond it): enough for a chart 1500 px wide."""
MAX_COLS = 300
"""Columns per heat map (steps bucketed beyond it)."""


@dataclass(frozen=True)
class Settings:
    runs_dir: Path
    host: str
    """The address the server is bound to ('' or 0.0.0.0 = every interface)."""
    token: str | None
    """Operator token; required for writes when `host` is not a loopback address."""
    refresh_s: float


def settings_from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from MINIRL_* variables; a missing host means every interface (the
    Streamlit default), so writes stay refused unless a token is configured."""
    env = os.environ if environ is None else environ
    try:
        refresh = float(env.get(ENV_REFRESH_S, DEFAULT_REFRESH_S))
    except ValueError:
        refresh = DEFAULT_REFRESH_S
    return Settings(
        runs_dir=Path(env.get(ENV_RUNS_DIR, "runs")),
        host=env.get(ENV_HOST, ""),
        token=env.get(ENV_TOKEN) or None,
        refresh_s=max(0.5, refresh),
    )


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 or ::1; False for '' and wildcard addresses."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def write_permission(host: str, token: str | None, entered: str | None) -> tuple[bool, str]:
    """(allowed, why) for a write requested from the app (operator action, import)."""
    if is_loopback(host):
        return True, f"bound to loopback ({host}): operator actions allowed"
    shown = host or "every interface"
    if not token:
        return False, (
            f"operator actions refused: the dashboard is exposed on {shown} without a token "
            "(restart it with --token, or bind 127.0.0.1)"
        )
    if not entered:
        return False, f"operator actions need the token (the dashboard is exposed on {shown})"
    utf8 = ("utf-8", "surrogatepass")  # a browser's JSON may carry a lone surrogate
    if not hmac.compare_digest(entered.encode(*utf8), token.encode(*utf8)):
        return False, "operator actions refused: wrong token"
    return True, "token accepted: operator actions allowed"
