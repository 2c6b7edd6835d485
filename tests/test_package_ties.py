"""The one-way ties of DESIGN.md, checked on the source, and the lazy CLI."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "minirl": {"trainer", "monitor", "dashboard"},
    "monitor": {"torch", "trainer", "minirl", "dashboard"},
    "dashboard": {"torch", "trainer", "minirl"},
}


def _imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_packages_keep_their_one_way_ties():
    bad = []
    for package, forbidden in FORBIDDEN.items():
        for path in (ROOT / package).rglob("*.py"):
            hit = _imported_roots(path) & forbidden
            if hit:
                bad.append(f"{path.relative_to(ROOT)} imports {sorted(hit)}")
    assert not bad, "\n".join(bad)


def test_cli_help_does_not_load_torch():
    code = (
        "import sys; from app.cli import main; main(['--help']); "
        "assert 'torch' not in sys.modules, 'torch loaded'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "analyze" in out.stdout


def test_cli_unknown_command_is_a_clear_error():
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "frobnicate"], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "unknown command 'frobnicate'" in out.stderr
    assert "Traceback" not in out.stderr
