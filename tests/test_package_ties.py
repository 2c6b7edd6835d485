"""The packages' one-way ties, checked on the source; no import circle; the lazy CLI.

The ties: `core/` (the shared vocabulary, errors, typed config) imports none of ours
and no torch; `minirl/` imports only torch and core; `monitor/` neither torch nor ours; `dashboard/`
only monitor; `trainer/` minirl and monitor, never the dashboard; `bench/` and `app/`
anything, and nothing imports them. Imports inside functions count like the others: a
circle closed by a lazy import is still two modules that cannot be read apart.
"""

import ast
import pathlib
import subprocess
import sys

from torchless_cli import run_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("core", "minirl", "monitor", "dashboard", "trainer", "bench", "app")
FORBIDDEN = {
    "core": {"torch", "numpy", "minirl", "trainer", "monitor", "dashboard", "bench", "app"},
    "minirl": {"trainer", "monitor", "dashboard", "bench", "app"},
    "monitor": {"torch", "trainer", "minirl", "dashboard", "bench", "app"},
    "dashboard": {"torch", "trainer", "minirl", "bench", "app"},
    "trainer": {"dashboard", "bench", "app"},
    "bench": {"app"},
}
MAX_LINES = 400


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, modules: frozenset[str] = frozenset()) -> set[str]:
    """Every module the file's import statements name, at any depth, relative ones
    resolved; `from a import b` names `a.b` when that is one of `modules`, else `a`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.add(sub if sub in modules else base)
    return names


def _sources() -> dict[str, pathlib.Path]:
    return {
        _module_name(path): path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
    }


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the repository's packages it imports (the most specific
    one that exists: `from a.b import f` is an edge to `a.b`)."""
    sources = _sources()
    modules = frozenset(sources)
    graph = {}
    for name, path in sources.items():
        edges = set()
        for target in _imports(path, modules):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_packages_keep_their_one_way_ties():
    bad = []
    for package, forbidden in FORBIDDEN.items():
        for path in (ROOT / package).rglob("*.py"):
            hit = {name.split(".")[0] for name in _imports(path)} & forbidden
            if hit:
                bad.append(f"{path.relative_to(ROOT)} imports {sorted(hit)}")
    assert not bad, "\n".join(bad)


def test_no_import_circle_between_modules():
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_a_circle_closed_by_a_lazy_import():
    """The check itself, on the shape the lab had (report imported stability inside a
    function, stability imported report at the top)."""
    graph = {"lab.report": {"lab.stability"}, "lab.stability": {"lab.report", "lab.runner"}}
    assert cycles({**graph, "lab.runner": set()}) == [["lab.report", "lab.stability"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_source_file_over_400_lines():
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in _sources().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert not long, "\n".join(long)


def test_cli_help_does_not_load_torch():
    out = run_cli("--help")
    assert out.returncode == 0, out.stderr
    assert "analyze" in out.stdout


def test_bench_help_lists_every_benchmark_without_loading_torch():
    out = run_cli("--help", cli="bench.cli")
    assert out.returncode == 0, out.stderr
    for name in ("stability", "detection", "speed", "vllm", "store", "dashboard", "coldstart"):
        assert f"\n  {name} " in out.stdout


def test_cli_unknown_command_is_a_clear_error():
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "frobnicate"], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "unknown command 'frobnicate'" in out.stderr
    assert "Traceback" not in out.stderr
