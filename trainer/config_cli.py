"""`minirl config [CONFIG.yaml] [--set KEY=VALUE ...]`: the whole run config, annotated.

Prints every section and key a run accepts, with the value this config resolves to and
what the key means (each field's docstring), as YAML that `minirl train` reads back.
`configs/reference.yaml` is its output for the defaults.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from core.config_docs import annotated_yaml
from core.errors import run_command
from core.typed_config import add_set_option

HEADER = (
    "# The whole minirl run config: every key, its value and its meaning.\n"
    "# Made by `minirl config{args}`; `minirl train` reads it as it is.\n"
)


def render(path: str | None, overrides: list[str]) -> str:
    from trainer.config import load_config

    cfg = load_config(path, overrides)
    args = "".join(f" {a}" for a in ([path] if path else []) + [f"--set {o}" for o in overrides])
    return HEADER.format(args=args) + "\n".join(annotated_yaml(cfg)) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="minirl config", description=__doc__.split("\n")[0])
    p.add_argument("config", nargs="?", help="a run config (YAML); default: all defaults")
    add_set_option(p)
    p.add_argument("--out", type=Path, help="write to this file instead of stdout")
    args = p.parse_args(argv)

    def go() -> int:
        text = render(args.config, args.overrides)
        if args.out:
            args.out.write_text(text)
        else:
            print(text, end="")
        return 0

    return run_command("config", go)
