"""A verl run's config read from a file, for `minirl watch` and `minirl import`'s
`--verl-config`.

A followed log carries no settings; verl's config does. Three files hold it:
- Hydra's `.hydra/config.yaml` in the run's output folder (`outputs/<date>/<time>/`): the
  composed config with the command line's overrides, interpolations unresolved;
- a W&B run's `files/config.yaml`: verl passes its resolved config to `wandb.init`, which
  stores every top-level key as `{value: ...}`;
- any YAML or JSON dump of the config (`OmegaConf.to_yaml`, `OmegaConf.to_container`).

The keys the monitor reads (monitor/integrations/verl_advice.py) are literal in verl's
defaults; an interpolation of an absolute key (`${data.train_batch_size}`, or
`checkpoints/${trainer.project_name}` inside a string, as verl's `default_local_dir`) is
resolved here as OmegaConf would. Others (`${oc.select:...}`, relative ones) stay strings,
which the readers ignore.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.safe_yaml import read_yaml_mapping

_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)\}")
"""An interpolation of an absolute key path, `${a.b.c}` (not a resolver, not relative)."""
_MAX_HOPS = 20
"""References followed from one value before it is left as it is (a cycle)."""
_MISSING = object()


def read_verl_config(path: Path) -> dict[str, Any]:
    """verl's config from `path` (module docstring); a file that is not one is a UserError."""
    config = read_yaml_mapping(path, "verl config")
    if _is_wandb(config):
        config = {k: v["value"] for k, v in config.items() if not k.startswith("_")}
    if not isinstance(config.get("actor_rollout_ref"), Mapping):
        raise UserError(
            f"verl config {path}: no actor_rollout_ref section; give the run's "
            ".hydra/config.yaml, its W&B files/config.yaml, or a dump of the config verl ran with"
        )
    return _resolved(config, config)


def add_verl_config_option(parser: argparse.ArgumentParser, also: str = "") -> None:
    """`--verl-config FILE`, as `minirl watch` and `minirl import` take it."""
    parser.add_argument(
        "--verl-config",
        type=Path,
        metavar="FILE",
        help="a verl run's config (.hydra/config.yaml, W&B files/config.yaml, or a dump): "
        "log its settings with each step" + (f", {also}" if also else ""),
    )


def _is_wandb(config: Mapping[str, Any]) -> bool:
    keys = [k for k in config if not k.startswith("_")]
    return bool(keys) and all(isinstance(config[k], Mapping) and "value" in config[k] for k in keys)


def _resolved(node: Any, root: Mapping[str, Any]) -> Any:
    if isinstance(node, Mapping):
        return {k: _resolved(v, root) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolved(v, root) for v in node]
    return _lookup(node, root)


def _lookup(value: Any, root: Mapping[str, Any]) -> Any:
    """A string's absolute `${a.b}` interpolations resolved (a whole-value one keeps the
    target's type, followed through chains; one inside a string takes a scalar's text);
    a reference to nothing, or a cycle, leaves the string as it is."""
    for _ in range(_MAX_HOPS):
        if not isinstance(value, str) or "${" not in value:
            return value
        whole = _REFERENCE.fullmatch(value)
        if whole is not None:
            target = _target(whole.group(1), root)
            if target is _MISSING:
                return value
            value = target
            continue
        parts = [_target(m.group(1), root) for m in _REFERENCE.finditer(value)]
        if not parts or any(p is _MISSING or isinstance(p, Mapping | list) for p in parts):
            return value
        value = _REFERENCE.sub(lambda m: str(_target(m.group(1), root)), value)
    return value


def _target(dotted: str, root: Mapping[str, Any]) -> Any:
    node: Any = root
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node
