"""Checkpoints of an RL run: the policy, AdamW, the controls, and the step they belong to.

One file per checkpoint, `<run_dir>/checkpoints/step_<N>.pt`, written atomically (temp
file + rename) so a crash mid-write leaves the previous checkpoints intact. Content is
plain tensors, numbers, strings and lists, so it loads with `weights_only=True`. A
sharded policy (the FSDP2 engine of a torchrun job) writes its weights and optimiser
state with torch.distributed.checkpoint into a fresh `step_<N>.<id>.dcp/`, every rank its
shards, before the .pt file that names it and commits the checkpoint (a committed
folder is never written into); any world size loads it back. This
module does not decide when to checkpoint or which one is healthy (the loop and the
monitor do).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

from core.errors import UserError
from core.vocabulary import WeightQuant
from minirl.loss import LossConfig
from trainer.controls import Controls
from trainer.leftovers import remove_leftovers

_NAME = re.compile(r"^step_(\d+)\.pt$")
_TMP = re.compile(r"^step_\d+\.tmp(?P<pid>\d+)$")
"""A checkpoint being written by process `pid` (renamed to step_N.pt when complete)."""
FORMAT = 1
SHARDS = ".dcp"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def list_checkpoints(run_dir: Path) -> dict[int, Path]:
    """{step: path} of the run's complete checkpoints."""
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return {}
    found = {}
    for path in folder.iterdir():
        m = _NAME.match(path.name)
        if m:
            found[int(m.group(1))] = path
    return dict(sorted(found.items()))


def remove_partial_checkpoints(run_dir: Path) -> list[Path]:
    """Delete the temporary files of checkpoint writes whose process was killed."""
    return remove_leftovers(checkpoint_dir(run_dir), _TMP)


def save_checkpoint(
    run_dir: Path,
    step: int,
    policy_state: dict[str, Any] | Any,
    controls: Controls,
    keep: int,
    *,
    pos: int | None = None,
    protect: frozenset[int] = frozenset(),
) -> Path:
    """Write step_<step>.pt atomically, then keep only the `keep` most recent, and those
    in `protect` (the healthy checkpoint a rollback of an open episode needs). `pos` is
    the position in the data and the lr schedule (= step unless a rollback rewound it).
    A `policy_state` with a `write(folder)` method (a sharded engine's) writes its shards
    there first; the payload then names the folder."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.pt"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    shards = folder / f"{path.stem}.{uuid.uuid4().hex[:8]}{SHARDS}"
    write = getattr(policy_state, "write", None)
    if callable(write):  # every rank writes its shards; the .pt below commits them
        write(shards)
        policy_state = {"shards": shards.name, **policy_state.meta}
    payload = {
        "format": FORMAT,
        "step": step,
        "pos": step if pos is None else pos,
        "policy": policy_state,
        "controls": _controls_to_data(controls),
        "torch_rng": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        payload["cuda_rng"] = torch.cuda.get_rng_state_all()  # one state per CUDA device
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:  # torch reports a full disk as a RuntimeError
        tmp.unlink(missing_ok=True)
        why = err.strerror if isinstance(err, OSError) else str(err).splitlines()[0][-80:]
        with contextlib.suppress(OSError):  # torch's own message does not say "disk full"
            why += f"; {shutil.disk_usage(folder).free / 1e6:.1f} MB free on its disk"
        raise UserError(
            f"checkpoint {path}: cannot be written ({why}); the earlier checkpoints and the "
            "store are intact; free some space, then resume with --resume"
        ) from None
    _remove_shards(path, keep=shards)  # this step's earlier or unfinished shards
    existing = list_checkpoints(run_dir)
    for old in list(existing)[:-keep]:
        if old not in protect:
            existing[old].unlink(missing_ok=True)  # uncommitted first, then its shards
            _remove_shards(existing[old])
    return path


def _remove_shards(checkpoint: Path, keep: Path | None = None) -> None:
    """Delete the shard folders of `checkpoint`'s step, except `keep`."""
    for found in checkpoint.parent.glob(f"{checkpoint.stem}.*{SHARDS}"):
        if found != keep:
            shutil.rmtree(found, ignore_errors=True)


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The payload of a checkpoint file (weights_only), or a UserError saying what is wrong.

    Loaded onto the CPU by default: RNG states must be CPU tensors, and load_state_dict
    copies weights and AdamW state onto the engine's device (one copy there, not two)."""
    try:
        payload = torch.load(path, weights_only=True, map_location=map_location)
    except FileNotFoundError:
        raise UserError(f"checkpoint {path}: no such file") from None
    except Exception as err:  # unpickling errors have many types; all mean "not loadable"
        raise UserError(f"checkpoint {path}: cannot be loaded ({type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(f"checkpoint {path}: not a minirl checkpoint of format {FORMAT}")
    policy = payload.get("policy")
    if isinstance(policy, dict) and "shards" in policy:
        shards = path.parent / policy["shards"]
        if not (shards / ".metadata").is_file():
            raise UserError(f"checkpoint {path}: its shards {shards} are missing")
        from trainer import distributed

        if distributed.active():  # the ranks of a sharded engine each load their part
            payload["policy"] = {**policy, "shards": str(shards)}
        else:  # one process: the whole state, as the single-process engine saves it
            from trainer.engines.reshard import unshard

            payload["policy"] = {**unshard(shards), "lr_scale": policy["lr_scale"]}
    return payload


def restore_rng(payload: dict[str, Any]) -> None:
    """Set torch's global RNG (and each CUDA device's, if the checkpoint has them and the
    device exists here) to the checkpoint's."""
    torch.set_rng_state(payload["torch_rng"].cpu())
    if "cuda_rng" in payload and torch.cuda.is_available():
        for index, state in enumerate(payload["cuda_rng"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state.cpu(), index)


def controls_from_data(data: dict[str, Any], rollout_quant: WeightQuant = "none") -> Controls:
    """The controls a checkpoint saved; `rollout_quant` for a checkpoint written before
    the rollout precision was one of them (the config's)."""
    loss = dict(data["loss"])
    loss["band"] = tuple(loss["band"])
    return Controls(
        loss=LossConfig(**loss),
        mini_batches=int(data["mini_batches"]),
        routing_replay=data["routing_replay"],
        lr_scale=float(data["lr_scale"]),
        lr_cap=data.get("lr_cap"),
        mini_batches_cap=data.get("mini_batches_cap"),
        rollout_quant=data.get("rollout_quant", rollout_quant),
        rollout_quant_floor=data.get("rollout_quant_floor"),
    )


def _controls_to_data(controls: Controls) -> dict[str, Any]:
    loss = dataclasses.asdict(controls.loss)
    loss["band"] = list(loss["band"])
    return {
        "loss": loss,
        "mini_batches": controls.mini_batches,
        "routing_replay": controls.routing_replay,
        "lr_scale": controls.lr_scale,
        "lr_cap": controls.lr_cap,
        "mini_batches_cap": controls.mini_batches_cap,
        "rollout_quant": controls.rollout_quant,
        "rollout_quant_floor": controls.rollout_quant_floor,
    }
