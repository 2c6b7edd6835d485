"""`minirl dashboard [RUNS_DIR] [--host 127.0.0.1] [--port 8501] [--token-file F]`: serve the app.

Launches `streamlit run dashboard/app.py` as a subprocess, bound to 127.0.0.1 unless told
otherwise, headless and without usage statistics. The runs folder, the bound address and
the operator token reach the app through environment variables (settings.py), never
through the URL or the child's command line. The token is read from $MINIRL_DASHBOARD_TOKEN
or `--token-file` (`--token T` still works, with a warning: every user sees it in `ps`).
The server is stopped with this process: on SIGTERM or Ctrl-C, and, on Linux, even when
this process is killed outright (the child asks the kernel for SIGTERM when its parent
dies). `start_dashboard` + `dashboard_url` + `wait_until_ready` are what
`minirl demo` calls; `main` is the CLI. This module does not import Streamlit itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from core.errors import UserError
from dashboard.settings import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_HOST,
    ENV_REFRESH_S,
    ENV_RUNS_DIR,
    ENV_TOKEN,
    is_loopback,
)

APP = Path(__file__).resolve().parent / "app.py"
ROOT = APP.parents[1]


def dashboard_url(host: str, port: int) -> str:
    """The URL to open; a wildcard bind is reached locally through 127.0.0.1."""
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}/"


def streamlit_command(host: str, port: int) -> list[str]:
    """`python -m streamlit run app.py` with the serving options (no secret in it)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--global.developmentMode", "false",
        "--client.toolbarMode", "viewer",
        "--client.showErrorDetails", "false",
    ]  # fmt: skip


def check_port(host: str, port: int) -> None:
    """UserError if (host, port) cannot be bound (in use, or not an address of this host)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            sock.bind((host, port))
        except OSError as err:
            raise UserError(
                f"cannot serve on {host}:{port}: {err.strerror}; pick another --port"
            ) from None


def start_dashboard(
    runs_dir: str | os.PathLike[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    *,
    refresh_s: float | None = None,
    log_file: str | os.PathLike[str] | None = None,
) -> subprocess.Popen:
    """Start the Streamlit server over `runs_dir` and return its process (not yet ready:
    call `wait_until_ready(dashboard_url(host, port), proc)`). The caller stops it with
    `proc.terminate()`. Output goes to `log_file` if given, else to this terminal."""
    runs = Path(runs_dir)
    if not runs.is_dir():
        raise UserError(f"runs directory {runs} does not exist")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise UserError(f"port must be an integer in 1..65535, got {port!r}")
    check_port(host, port)
    env = dict(os.environ)
    env[ENV_RUNS_DIR] = str(runs.resolve())
    env[ENV_HOST] = host
    env.pop(ENV_TOKEN, None)
    if token:
        env[ENV_TOKEN] = token
    if refresh_s is not None:
        env[ENV_REFRESH_S] = str(refresh_s)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = open(log_file, "ab") if log_file is not None else None  # noqa: SIM115 (child owns it)
    try:
        return subprocess.Popen(
            streamlit_command(host, port),
            env=env,
            cwd=str(ROOT),
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    finally:
        if out is not None:
            out.close()  # the child holds its own descriptor


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl
    PR_SET_PDEATHSIG), so a killed `minirl dashboard` leaves no server listening."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """The operator token: --token (warned), else --token-file, else the environment."""
    if token:
        print(
            "minirl dashboard: warning: --token is visible to every user of this machine "
            f"(ps); set ${ENV_TOKEN} or use --token-file instead",
            file=sys.stderr,
        )
        return token
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"--token-file {token_file}: cannot read ({err})") from None
        if not text:
            raise UserError(f"--token-file {token_file}: empty")
        return text
    return os.environ.get(ENV_TOKEN) or None


def wait_until_ready(
    url: str, proc: subprocess.Popen | None = None, timeout_s: float = 60.0
) -> None:
    """Block until the server answers its health check; UserError if it dies or times out."""
    health = url.rstrip("/") + "/_stcore/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise UserError(f"the dashboard server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(health, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise UserError(f"the dashboard did not answer at {health} within {timeout_s:g} s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="minirl dashboard", description="Serve the Streamlit dashboard over a folder of runs."
    )
    parser.add_argument(
        "runs_dir", nargs="?", default="runs", help="folder of runs (default: runs)"
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 8501)")
    parser.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding the operator token, required for actions on a non-loopback "
        f"--host (or set ${ENV_TOKEN})",
    )
    parser.add_argument("--token", help="the operator token itself (visible in ps: avoid)")
    parser.add_argument("--refresh", type=float, help="live refresh period, s")
    args = parser.parse_args(argv)
    args.token = read_token(args.token, args.token_file)
    if not is_loopback(args.host) and not args.token:
        print(
            f"minirl dashboard: warning: exposed on {args.host or 'every interface'} without "
            "--token: operator actions and imports are refused",
            file=sys.stderr,
        )
    proc = start_dashboard(args.runs_dir, args.host, args.port, args.token, refresh_s=args.refresh)
    url = dashboard_url(args.host, args.port)
    try:
        wait_until_ready(url, proc)
        print(f"minirl dashboard: serving {Path(args.runs_dir).resolve()} at {url}", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
