"""YAML as every config of the project reads it: safe, YAML 1.2 scalars, and bounded.

- Safe: a SafeLoader subclass, so no tag can build an arbitrary Python object.
- YAML 1.2 scalars: only true/false are booleans (`on`, `no` stay strings) and `3e-4` is
  a float, not the string PyYAML's YAML 1.1 would make of it. The dumper quotes exactly
  the strings the loader would misread.
- Bounded, so that a hostile or broken file is one YAML error with its line, never a
  traceback: nesting deeper than MAX_DEPTH (Python would run out of stack), an integer
  longer than MAX_INT_DIGITS (Python refuses to convert it), and a key given twice in one
  mapping (YAML forbids it; PyYAML would silently keep the last) are refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from core.errors import UserError, read_text

MAX_DEPTH = 100
"""Nesting levels of collections a config may use (real ones use fewer than 10)."""
MAX_INT_DIGITS = 1000
"""Longer integers are refused at parse time (a config's integers fit in 64 bits)."""

_BOOL_TAG, _FLOAT_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_RE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_FLOAT_RE = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


def _yaml12(cls: type) -> type:
    """Swap PyYAML's 1.1 bool/float resolvers for YAML 1.2 ones (loader and dumper alike)."""
    cls.yaml_implicit_resolvers = {
        ch: [(tag, rx) for tag, rx in rules if tag not in (_BOOL_TAG, _FLOAT_TAG)]
        for ch, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    cls.add_implicit_resolver(_BOOL_TAG, _BOOL_RE, list("tTfF"))
    cls.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, list("-+0123456789."))
    return cls


@_yaml12
class _Loader(yaml.SafeLoader):
    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        """The composer recurses once per level: refuse the level past MAX_DEPTH."""
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise ConstructorError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> int:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            problem = f"an integer of {digits} digits (at most {MAX_INT_DIGITS})"
            raise ConstructorError(None, None, problem, node.start_mark)
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        """A key given twice in one mapping is an error (merged `<<` keys may be
        overridden, as YAML allows)."""
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:
                    continue  # an unhashable key: the base constructor says so
                if first is not key_node.start_mark:
                    problem = f"duplicate key {key!r} (first given at line {first.line + 1})"
                    mark = key_node.start_mark
                    raise ConstructorError("in a mapping", node.start_mark, problem, mark)
        return super().construct_mapping(node, deep)


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


@_yaml12
class _Dumper(yaml.SafeDumper):
    pass


def yaml_load(text: str) -> Any:
    """Parse YAML text with YAML 1.2 scalars, within the bounds above (raises
    yaml.YAMLError, with the line of the problem)."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: safe


def yaml_dump(data: Any) -> str:
    """Dump plain data as block YAML, keys in their given order, readable by yaml_load."""
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error: where (line, column) and what."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(err, "problem", None) or (str(err).splitlines() or ["?"])[0]
    return f"not valid YAML{where}: {problem}"


def read_yaml_mapping(path: Path, what: str = "config") -> dict[str, Any]:
    """The top-level mapping of a YAML file ({} when empty); a missing, unreadable or
    unparsable file, or one that is not a mapping, is a UserError naming `what` and path."""
    try:
        data = yaml_load(read_text(path, what))
    except yaml.YAMLError as err:
        raise UserError(f"{what} {path}: {yaml_problem(err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: expected a mapping of sections, got {type(data).__name__}")
    return data
