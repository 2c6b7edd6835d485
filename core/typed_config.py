"""Typed configs: plain YAML data <-> a tree of dataclasses, checked against type hints.

The one loader of every config in the project (the trainer's run config and the
monitor's `MonitorConfig`; torch-free, so the monitor can use it). It converts and
type-checks values (bool, int, float, str, Literal, unions, tuple, list, dict, nested
dataclasses), rejects unknown keys, merges a partial mapping onto a section's default,
parses the `--set a.b=c` overrides, and turns the `ValueError` of a dataclass's
`__post_init__` into a `UserError` naming the key path. It holds no defaults.

Numbers, for every section alike: a float is finite, an integer is at most 2^53 in
magnitude (what a JSON reader keeps exactly), and a field whose default is a positive
number takes no negative value. YAML (core/safe_yaml.py) is read with YAML 1.2
scalars, safely and within bounds: deep nesting, huge integers and duplicate keys are
refused with their line.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import json
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

from core.errors import UserError
from core.safe_yaml import (  # noqa: F401 (read_yaml_mapping, yaml_dump: re-exported)
    read_yaml_mapping,
    yaml_dump,
    yaml_load,
    yaml_problem,
)

T = TypeVar("T")

# ---------------------------------------------------------------------------- value rules


class ConfigValueError(ValueError):
    """A field value a config's __post_init__ refuses: which field, the value, what is
    allowed. The loader prefixes the section path, so users see `train.lr`."""

    def __init__(self, field: str, value: Any, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is invalid; allowed: {allowed}")


def check(ok: bool, field: str, value: Any, allowed: str) -> None:
    """Raise ConfigValueError unless `ok`; for use in __post_init__ (never clamp)."""
    if not ok:
        raise ConfigValueError(field, value, allowed)


# ---------------------------------------------------------------------------- data -> dataclass

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _show(value: Any) -> str:
    return f"{_short(value)} ({type(value).__name__})"


def _short(value: Any, limit: int = 80) -> str:
    """repr of a value a user gave, cut to one short line (a config may hold anything)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


MAX_INT = 2**53
"""Largest integer magnitude of a config: the store keeps configs as JSON, and a JSON
reader (the browser, most languages) holds integers exactly only up to 2^53."""


def _number(tp: type, value: Any, path: str) -> Any:
    """An accepted int or float, checked against the number rules (module docstring)."""
    if isinstance(value, int) and abs(value) > MAX_INT:
        raise UserError(
            f"{_where(path)}: {_short(value)} is out of range; allowed: an integer of at "
            "most 2^53 in magnitude"
        )
    value = tp(value)
    if tp is float and not math.isfinite(value):
        raise UserError(f"{_where(path)}: {value!r} is invalid; allowed: a finite number")
    return value


def _sign_rule(f: dataclasses.Field, value: Any, path: str) -> None:
    """A field whose default is a positive number takes no negative value."""
    default = _default(f)
    is_num = [isinstance(x, int | float) and not isinstance(x, bool) for x in (default, value)]
    if all(is_num) and default > 0 and value < 0:
        raise UserError(
            f"{_where(path)}: {value!r} is invalid; allowed: a number >= 0 (default {default!r})"
        )


def _where(path: str) -> str:
    return f"config key '{path}'" if path else "config"


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def from_data(cls: type[T], data: Any, path: str = "", base: T | None = None) -> T:
    """Build dataclass `cls` from plain data (a mapping), checking every key and type.

    Missing keys keep their value in `base`, or without one the dataclass default. A
    nested section given as a mapping is merged onto its current value the same way, so
    `{"train_inference_kl": {"warn_level": 0.05}}` changes one field of a default rule
    and keeps the others. Unknown keys, wrong types and values that the dataclass's
    __post_init__ rejects raise UserError naming the key path.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{_where(path)}: expected a mapping of keys, got {_show(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        sub = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UserError(
                f"{_where(sub)} is unknown{hint}; "
                f"{f'{path!r}' if path else 'the top level'} has: {', '.join(fields)}"
            )
        current = getattr(base, key) if base is not None else _default(fields[key])
        if dataclasses.is_dataclass(current) and isinstance(value, dict | None):
            kwargs[key] = from_data(type(current), value, sub, base=current)
        else:
            kwargs[key] = convert(hints[key], value, sub)
            _sign_rule(fields[key], kwargs[key], sub)
    if base is None:
        for name, f in fields.items():
            no_default = f.default is f.default_factory is dataclasses.MISSING
            if no_default and name not in kwargs:
                raise UserError(f"{_where(f'{path}.{name}' if path else name)} is required")
    try:
        return dataclasses.replace(base, **kwargs) if base is not None else cls(**kwargs)
    except ConfigValueError as err:
        sub = f"{path}.{err.field}" if path else err.field
        raise UserError(
            f"{_where(sub)}: {err.value!r} is invalid; allowed: {err.allowed}"
        ) from None
    except ValueError as err:  # a section's own rule, in its own words
        raise UserError(f"{_where(path)}: {err}") from None


def _describe(tp: Any) -> str:
    """A type hint in words, for error messages."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _describe(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0])}"
        return f"a list of {len(args)} items ({', '.join(_describe(a) for a in args)})"
    if origin is list:
        return f"a list of {_describe(args[0])}" if args else "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return f"a mapping (section {tp.__name__})"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


_ACCEPTS: dict[Any, tuple[type, ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
    Path: (str, Path),
}


def convert(tp: Any, value: Any, path: str) -> Any:
    """Check `value` against type hint `tp` and return it in that type (list -> tuple,
    int -> float, str -> Path, mapping -> dataclass); UserError names `path`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)

    def bad() -> UserError:
        return UserError(f"{_where(path)}: expected {_describe(tp)}, got {_show(value)}")

    if tp is Any or tp is object:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_data(tp, value, path)
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise bad()
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options:
            try:
                return convert(option, value, path)
            except UserError:
                if len(options) == 1 and dataclasses.is_dataclass(option):
                    raise  # the section's own message is the precise one
        raise bad()
    if tp in _ACCEPTS:  # bool is an int to Python, never to a config
        if isinstance(value, _ACCEPTS[tp]) and (tp is bool or not isinstance(value, bool)):
            if tp in (int, float):
                return _number(tp, value, path)
            return tp(value) if tp is Path else value
        raise bad()
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise bad()
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise bad()
            return tuple(
                convert(a, v, f"{path}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        item = args[0] if args else Any
        items = [convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise bad()
        k_tp, v_tp = args if args else (Any, Any)
        return {
            convert(k_tp, k, f"{path}.{k}"): convert(v_tp, v, f"{path}.{k}")
            for k, v in value.items()
        }
    raise TypeError(f"typed_config: unsupported type hint {tp!r} at '{path}'")


# ---------------------------------------------------------------------------- dataclass -> data


def to_data(obj: Any) -> Any:
    """Plain YAML/JSON-able data: dataclasses become dicts (field order), tuples become
    lists, Paths strings. The inverse of from_data."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, list | tuple):
        return [to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_data(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def config_hash(*objs: Any, length: int = 16) -> str:
    """A stable hex digest of configs (same values -> same hash, across processes)."""
    text = json.dumps([to_data(o) for o in objs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


# ---------------------------------------------------------------------------- overrides

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


def add_set_option(
    parser: argparse.ArgumentParser,
    dest: str = "overrides",
    help: str = "override a config key, e.g. --set train.mini_batches=4 (repeatable)",
) -> None:
    """The `--set KEY=VALUE` option of a command that takes a config (repeatable): the
    list it collects in `dest` is for `parse_overrides` (or `load_config`)."""
    parser.add_argument(
        "--set", dest=dest, action="append", default=[], metavar="KEY=VALUE", help=help
    )


def parse_overrides(overrides: list[str] | tuple[str, ...], data: dict | None = None) -> dict:
    """The `--set a.b=c` overrides of a command applied in order onto `data` (a new dict
    if None), as plain data for `from_data`: the one parser of every `--set`."""
    data = {} if data is None else data
    for override in overrides:
        apply_override(data, override)
    return data


def apply_override(data: dict, override: str) -> None:
    """Apply one `a.b.c=value` override in place; the value is parsed as a YAML scalar
    (or flow list/mapping), so `train.lr=3e-4`, `train.betas=[0.9,0.95]`, `x=null`."""
    key, sep, raw = override.partition("=")
    key = key.strip()
    if not sep or not _KEY_RE.match(key):
        raise UserError(
            f"override {_short(override)}: expected KEY=VALUE with a dotted key, e.g. train.lr=3e-4"
        )
    try:
        value = yaml_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        raise UserError(f"override {_short(override)}: value is {yaml_problem(err)}") from None
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            prefix = ".".join(parts[: i + 1])
            raise UserError(f"override {_short(override)}: '{prefix}' is a value, not a section")
        node = child
    node[parts[-1]] = value
