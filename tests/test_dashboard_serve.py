"""`minirl dashboard`: the serving command, its defaults and its refusals.

The served app itself is exercised in a real browser (test_dashboard_browser.py); here
the command line: loopback by default, headless, no usage statistics, no token on the
command line, and one clear line with exit 2 for a missing folder or a busy port.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import UserError
from dashboard.serve import check_port, dashboard_url, streamlit_command
from dashboard.settings import DEFAULT_HOST, DEFAULT_PORT


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "dashboard", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_defaults_are_loopback_headless_and_without_telemetry():
    assert (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 8501)
    cmd = streamlit_command(DEFAULT_HOST, DEFAULT_PORT)
    opts = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4].endswith("dashboard/app.py")
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == "8501"
    assert opts["--server.headless"] == "true"
    assert opts["--browser.gatherUsageStats"] == "false"


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8501/"),
        ("0.0.0.0", "http://127.0.0.1:8501/"),
        ("::1", "http://[::1]:8501/"),
        ("10.1.2.3", "http://10.1.2.3:8501/"),
    ],
)
def test_dashboard_url(host, url):
    assert dashboard_url(host, 8501) == url


def test_missing_runs_folder_is_one_clear_line(tmp_path: Path):
    out = cli(str(tmp_path / "nope"))
    assert out.returncode == 2, out.stderr
    assert "does not exist" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_busy_port_is_one_clear_line(tmp_path: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match="pick another --port"):
            check_port("127.0.0.1", port)
        out = cli(str(tmp_path), "--port", str(port))
    assert out.returncode == 2 and "pick another --port" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_exposed_without_token_warns(tmp_path: Path):
    # an address this host does not have: the warning comes first, then the bind fails
    out = cli(str(tmp_path), "--host", "192.0.2.1", "--port", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "without --token" in out.stderr and "refused" in out.stderr
