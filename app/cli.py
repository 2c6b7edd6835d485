"""The `minirl` console script: a thin, lazy dispatcher.

Each subcommand lives in its own module and is imported only when called, so that
`analyze`, `export`, `import`, `dashboard` and `prometheus-rules` never load torch and
start in well under a second. A subcommand is a function `main(argv) -> int`. The core
install (`pip install minirl`) has no torch and no Streamlit: a command that needs an extra
says in one line which one to install instead of failing with a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

from core.commands import usage

# name -> (module, one-line help); the module is imported only when its command runs.
# analyze, export, repair, import, dashboard and prometheus-rules must not import torch.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("app.demo", "short live training run plus the dashboard"),
    "train": ("trainer.train", "run training from a YAML config"),
    "config": ("trainer.config_cli", "print the whole run config, every key with its meaning"),
    "dashboard": ("dashboard.serve", "serve the Streamlit dashboard over a folder of runs"),
    "analyze": ("monitor.cli.analyze", "post-hoc analysis of a run (collapse onset, precursors)"),
    "export": ("monitor.cli.export", "every recorded scalar as step,name,value rows"),
    "repair": ("monitor.cli.repair", "salvage a damaged run store into a new run"),
    "import": (
        "monitor.cli.import_logs",
        "import a foreign log (JSONL, CSV, TensorBoard, console...) as a run",
    ),
    "watch": ("monitor.watch.cli", "follow a live TensorBoard/JSONL/MLflow/W&B log as a run"),
    "prometheus-rules": ("monitor.cli.rules", "print the Prometheus alert rules (YAML)"),
    "build-model": ("trainer.models.build_cli", "build a tiny local checkpoint + tokenizer"),
    "bench": ("bench.cli", "benchmarks and the stability lab"),
}

# Third-party module -> the extra of pyproject.toml that installs it.
EXTRA_OF: dict[str, str] = {
    **dict.fromkeys(("torch", "transformers", "safetensors"), "train"),
    "streamlit": "dashboard",
    **dict.fromkeys(("rlwatch", "matplotlib"), "bench"),
}
# Modules a command cannot start without, checked before it is imported (find_spec imports
# nothing): the dashboard runs Streamlit in a child process, where a missing module would
# only show as a dead server.
NEEDS: dict[str, tuple[str, ...]] = {
    "train": ("torch", "transformers", "safetensors"),
    "config": ("torch",),
    "build-model": ("torch", "transformers", "safetensors"),
    "demo": ("torch", "transformers", "safetensors", "streamlit"),
    "dashboard": ("streamlit",),
    "bench": ("torch", "transformers", "safetensors"),
}


def _install_hint(command: str, missing: list[str]) -> str:
    extras = ",".join(dict.fromkeys(EXTRA_OF[name] for name in missing))
    return (
        f"minirl {command}: needs {', '.join(missing)}, not in this install: "
        f"pip install 'minirl[{extras}]'"
    )


def _usage() -> str:
    return usage("minirl", "COMMAND", "command", COMMANDS)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"minirl: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    missing = [mod for mod in NEEDS.get(name, ()) if importlib.util.find_spec(mod) is None]
    if missing:
        print(_install_hint(name, missing), file=sys.stderr)
        return 2
    from core.errors import run_command

    def command() -> int:
        try:
            module = importlib.import_module(COMMANDS[name][0])
            return int(module.main(rest) or 0)
        except ModuleNotFoundError as err:  # an extra's module, imported further down
            root = (err.name or "").partition(".")[0]
            if root not in EXTRA_OF:
                raise
            print(_install_hint(name, [root]), file=sys.stderr)
            return 2

    return run_command(name, command)


if __name__ == "__main__":
    sys.exit(main())
