"""Fuzzed configs: YAML run-config files and `--set` overrides through the shared loader.

Inputs are built from the real config's key paths (so most reach the type and range
checks, not only the YAML parser) with hostile values: huge and negative numbers, NaN
and infinities, strings where numbers go, nested lists, anchors, unsafe tags, duplicate
keys, deep nesting and plain random text. Accepted or one UserError, nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import typing
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from bench.reliability.fuzzing import Tally, fuzz

HOSTILE_SCALARS = (
    ".nan",
    ".inf",
    "-.inf",
    "1e400",
    "-1",
    "0",
    "-0.0",
    "null",
    "~",
    "true",
    "no",
    "[]",
    "{}",
    "''",
    "1_000",
    "0x1F",
    "0o17",
    "2e-308",
    "18446744073709551616",
    "9" * 1200,
    "!!python/object/apply:os.system ['true']",
    "!!binary aGVsbG8=",
    "&a 1",
    "*a",
    "*undefined",
    "[1, [2, [3]]]",
    "{a: 1, a: 2}",
    "'\\ud800'",
    '"\\ud800"',
    '"\\x00"',
    "|\n  text",
    "2001-12-14",
    "=",
    "a=b",
)


def config_paths() -> list[str]:
    """Every leaf key path of the run config (e.g. 'monitor.detectors.grad_norm.z')."""
    from trainer.config import RunConfig

    out: list[str] = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            kind = type(default) if dataclasses.is_dataclass(default) else hints[f.name]
            if dataclasses.is_dataclass(kind):
                walk(kind, f"{prefix}{f.name}.")
            else:
                out.append(f"{prefix}{f.name}")

    walk(RunConfig, "")
    return out


def scalar_texts() -> st.SearchStrategy[str]:
    """YAML scalar texts: plausible small numbers and booleans (so that some documents
    pass and reach the sections' own checks), numbers of every size and sign, hostile
    forms, quoted text."""
    plausible = st.one_of(
        st.integers(1, 64).map(str),
        st.floats(0.001, 1.0).map(repr),
        st.sampled_from(["true", "false"]),
    )
    return st.one_of(
        plausible,
        plausible,
        st.sampled_from(HOSTILE_SCALARS),
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=12).map(json.dumps),
        st.from_regex(r"[a-z0-9_.\-]{0,10}", fullmatch=True),
    )


def _render(tree: dict, depth: int = 0) -> list[str]:
    lines = []
    for key, value in tree.items():
        if isinstance(value, dict):
            lines += [f"{'  ' * depth}{key}:", *_render(value, depth + 1)]
        else:
            lines.append(f"{'  ' * depth}{key}: {value}")
    return lines


@st.composite
def config_texts(draw: st.DrawFn, paths: list[str]) -> str:
    """A YAML document: real keys with hostile values, sometimes a duplicated key, an
    unknown key, deep nesting or random characters."""
    kind = draw(st.sampled_from(["keys"] * 6 + ["deep", "random", "huge"]))
    if kind == "deep":
        depth = draw(st.integers(50, 3000))
        opener = draw(st.sampled_from(["[", "{a: "]))
        closer = "]" if opener == "[" else "}"
        return f"train: {opener * depth}1{closer * depth}"
    if kind == "random":
        return draw(st.text(alphabet=" \n\t:-[]{},&*!|>'\"#.%@`0123456789abceinu_", max_size=200))
    if kind == "huge":
        return f"seed: {'7' * draw(st.integers(900, 6000))}"
    tree: dict = {}
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=6)):
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[leaf] = draw(scalar_texts())
    lines = _render(tree)
    if draw(st.booleans()) and lines:  # a key given twice, or one nobody knows
        i = draw(st.integers(0, len(lines) - 1))
        extra = lines[i] if draw(st.booleans()) else f"{lines[i].split(':')[0]}x: 1"
        lines.insert(i + 1, extra)
    return "\n".join(lines) + "\n"


def overrides(paths: list[str]) -> st.SearchStrategy[list[str]]:
    """`--set` lists: real or mangled keys, hostile values, missing '=' signs."""
    key = st.one_of(
        st.sampled_from(paths),
        st.sampled_from(paths).map(lambda p: p.rsplit(".", 1)[0]),
        st.text(max_size=15),
    )
    one = st.one_of(
        st.tuples(key, scalar_texts()).map(lambda kv: f"{kv[0]}={kv[1]}"),
        st.text(max_size=30),
    )
    return st.lists(one, min_size=1, max_size=4)


def _names_config_input(path: Path):
    def names(value: Any, message: str) -> bool:
        return message.startswith(("config key '", "config:", f"config {path}", "override "))

    return names


def fuzz_config_files(n: int) -> Tally:
    """Run-config YAML files through `trainer.config.load_config`."""
    from trainer.config import load_config

    paths = config_paths()
    with tempfile.TemporaryDirectory(prefix="fuzz-config-") as tmp:
        path = Path(tmp) / "run.yaml"

        def check(text: str, tally: Tally) -> None:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            load_config(path)

        return fuzz(
            "run config (YAML file)", config_texts(paths), check, n, _names_config_input(path)
        )


def fuzz_overrides(n: int) -> Tally:
    """`--set KEY=VALUE` lists through `load_config(None, overrides)`."""
    from trainer.config import load_config

    def check(items: list[str], tally: Tally) -> None:
        load_config(None, items)

    return fuzz(
        "--set overrides", overrides(config_paths()), check, n, _names_config_input(Path("-"))
    )
