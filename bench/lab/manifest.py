"""The lab's manifest: every run's spec and state, in `<lab_dir>/manifest.json`.

Rewritten atomically (temp file + rename) after every change, so that an interrupted lab
picks up where it stopped and a report can read a lab that is still running. A run's key
keeps its spec for the lab's lifetime: asking for other settings under a known key is an
error, never a silent rerun.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.errors import UserError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
Status = Literal["pending", "running", "done", "failed"]


@dataclass(frozen=True)
class RunSpec:
    """One run of the lab: which recipe, with which overrides, where."""

    key: str
    """Unique name in the lab, e.g. `onpolicy_minirl/seed0`."""
    config: str
    """Absolute path of the YAML recipe."""
    overrides: tuple[str, ...]
    """`a.b=c` overrides passed with --set (seed, steps, ...)."""
    run_dir: str
    """Absolute run directory (store, checkpoints, resolved config)."""


@dataclass
class RunState:
    """Where one run stands; persisted in the manifest."""

    status: Status = "pending"
    attempts: int = 0
    """Processes launched for this run (first start and every resume)."""
    returncode: int | None = None
    stopped: str | None = None
    """How the trainer said it ended: completed, non-finite, interrupted, ..."""
    pid: int | None = None
    """The child while running: a new runner waits for a stray one to exit."""
    seconds: float = 0.0
    """Wall time over all attempts."""
    error: str | None = None


@dataclass
class Manifest:
    specs: dict[str, RunSpec] = field(default_factory=dict)
    states: dict[str, RunState] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def manifest_path(lab_dir: Path) -> Path:
    return Path(lab_dir) / MANIFEST


def load_manifest(lab_dir: Path) -> Manifest:
    """The lab's manifest (empty if there is none yet)."""
    path = manifest_path(lab_dir)
    if not path.is_file():
        return Manifest()
    try:
        data = json.loads(path.read_text())
        specs = {
            k: RunSpec(**{**v["spec"], "overrides": tuple(v["spec"]["overrides"])})
            for k, v in data["runs"].items()
        }
        states = {k: RunState(**v["state"]) for k, v in data["runs"].items()}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a lab manifest ({err}); move it away to start over") from None
    return Manifest(specs, states, data.get("meta", {}))


def save_manifest(lab_dir: Path, manifest: Manifest) -> None:
    """Write the manifest atomically (temp file + rename)."""
    path = manifest_path(lab_dir)
    runs = {
        k: {"spec": dataclasses.asdict(s), "state": dataclasses.asdict(manifest.states[k])}
        for k, s in manifest.specs.items()
    }
    data = {"version": MANIFEST_VERSION, "meta": manifest.meta, "runs": runs}
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def merge_specs(manifest: Manifest, specs: Sequence[RunSpec]) -> Manifest:
    """Add new specs as pending; a known key must keep its spec (else the recorded run
    would not be the run asked for)."""
    for spec in specs:
        old = manifest.specs.get(spec.key)
        if old is None:
            manifest.specs[spec.key] = spec
            manifest.states[spec.key] = RunState()
        elif old != spec:
            raise UserError(
                f"run {spec.key} is recorded with other settings ({old.overrides} in "
                f"{old.run_dir}); use another --lab-dir or remove the old one"
            )
    return manifest
