"""The `minirl` CLI (or `minirl bench`'s) in a fresh interpreter that fails if anything
imported torch: the monitor's commands (analyze, import, export, prometheus-rules...) and
the help of both dispatchers must stay light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = (
    "import sys; from {cli} import main; rc = main(sys.argv[1:]); "
    "assert 'torch' not in sys.modules, 'torch loaded'; sys.exit(rc)"
)


def command(*args: str, cli: str = "app.cli") -> list[str]:
    """The argv that runs `minirl ARGS` (the `main` of module `cli`) without torch (for a
    Popen of one's own)."""
    return [sys.executable, "-c", CODE.format(cli=cli), *args]


def run_cli(*args: str, cli: str = "app.cli") -> subprocess.CompletedProcess:
    """Run `minirl ARGS` from the repository root; output captured as text."""
    return subprocess.run(command(*args, cli=cli), capture_output=True, text=True, cwd=ROOT)
