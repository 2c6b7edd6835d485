"""Checkpoints across world sizes: a sharded (DCP) checkpoint read whole by one process,
and a single-process checkpoint put in the form FSDP2's loaders spread over N ranks.

The FSDP2 engine (trainer/engines/distributed/fsdp.py) saves {"model", "optim"} with
torch.distributed.checkpoint, keyed by parameter name (FQN); the single-process engine
saves torch's own state dicts, AdamW's keyed by parameter index. Both hold the same
tensors; these two functions translate. Loading N shards on M ranks needs neither:
DCP reshards by itself.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys


def full_fqn_state(mirror: nn.Module, state: dict) -> tuple[dict, dict]:
    """A single-process state dict ({"model", "optimizer"} as torch saves them) as full
    FQN-keyed model and optimiser state, through a scratch AdamW on the unsharded copy
    (its hyperparameters are the saved ones: loading the state replaces them)."""
    mirror.load_state_dict(state["model"])
    scratch = torch.optim.AdamW(mirror.parameters())
    scratch.load_state_dict(state["optimizer"])
    options = StateDictOptions(full_state_dict=True)
    return (
        get_model_state_dict(mirror, options=options),
        get_optimizer_state_dict(mirror, scratch, options=options),
    )


def unshard(folder: Path) -> dict[str, Any]:
    """A sharded checkpoint's weights and AdamW state, whole, in the form the
    single-process engine saves ({"model", "optimizer"} keyed by parameter index in the
    optimiser's order): resuming a run of N ranks in one process."""
    with warnings.catch_warnings():  # "no process group: loading in one process": yes
        warnings.simplefilter("ignore", UserWarning)
        state = _load_state_dict_from_keys(checkpoint_id=folder)
    groups = state["optim"]["param_groups"]
    index = {fqn: i for i, fqn in enumerate(f for g in groups for f in g["params"])}
    return {
        "model": state["model"],
        "optimizer": {
            "state": {index[fqn]: s for fqn, s in state["optim"]["state"].items()},
            "param_groups": [{**g, "params": [index[f] for f in g["params"]]} for g in groups],
        },
    }
