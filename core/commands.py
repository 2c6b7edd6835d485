"""A lazy command table's help page: `minirl`'s commands and `minirl bench`'s benchmarks
are both name -> (module, one-line help), each module imported only when its command
runs, and both list themselves the same way."""

from __future__ import annotations

from collections.abc import Mapping


def usage(prog: str, arg: str, noun: str, table: Mapping[str, tuple[str, str]]) -> str:
    """`prog ARG [ARGS...]`, one line per entry of `table` (its name and help), and how to
    see the options of one."""
    width = max(map(len, table))
    lines = [f"usage: {prog} {arg} [ARGS...]", "", f"{noun}s:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in table.items()]
    lines += ["", f"Run `{prog} {arg} --help` for the options of one {noun}."]
    return "\n".join(lines)
