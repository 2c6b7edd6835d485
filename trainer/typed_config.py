"""Moved to `core.typed_config` (the one config loader of trainer and monitor alike);
this name re-exports it for callers not yet switched."""

from core.typed_config import (
    ConfigValueError,
    apply_override,
    check,
    config_hash,
    convert,
    from_data,
    parse_overrides,
    to_data,
    yaml_dump,
    yaml_load,
)

__all__ = [
    "ConfigValueError",
    "apply_override",
    "check",
    "config_hash",
    "convert",
    "from_data",
    "parse_overrides",
    "to_data",
    "yaml_dump",
    "yaml_load",
]
