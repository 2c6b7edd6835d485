"""The whole run config in one place: every section and field with its default and meaning.

Field meanings are the attribute docstrings under each dataclass field (the string
literal that follows it), read from the source with `ast`: Python does not keep them at
run time. `annotated_yaml` renders a config object as YAML with those meanings as comments,
so `minirl config` (and `configs/reference.yaml`, made by it) show a newcomer every key a
run accepts. Nothing here validates a config; `typed_config.from_data` does.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import textwrap
from typing import Any

import yaml

from core.typed_config import to_data


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} of a dataclass, from the string literal under each field (a base
    class's fields keep the base's docstrings)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _scalar(value: Any) -> str:
    """One YAML value on one line (flow style for lists)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}".rstrip() for line in text.splitlines()]


def annotated_yaml(obj: Any, indent: str = "") -> list[str]:
    """YAML lines of a dataclass tree, each field preceded by its docstring as comments.
    `yaml.safe_load` of the joined lines gives `typed_config.to_data(obj)` back."""
    lines: list[str] = []
    docs = field_docs(type(obj))
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        doc = docs.get(f.name) or (
            inspect.cleandoc(type(value).__doc__ or "") if dataclasses.is_dataclass(value) else ""
        )
        lines += _comment(doc, indent) if doc else []
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            lines.append(f"{indent}{f.name}:")
            lines += annotated_yaml(value, indent + "  ")
        else:
            lines.append(f"{indent}{f.name}: {_scalar(to_data(value))}")
    return lines
