"""The Megatron engine's checkpoint, one layout for every world size: the whole model's
Megatron-layout weights and AdamW state keyed by parameter name, experts under their
global index.

With expert parallel, rank r holds experts r*E/ep .. (r+1)*E/ep - 1 of every MoE layer
as its `local_experts.0 ..`; the checkpoint names them `local_experts.<global index>`,
exactly as the world-size-1 module does. So a checkpoint of N ranks loads into M ranks
(each takes its experts by name), and AdamW's moments follow their parameter (torch's
own optimiser state dict keys them by position, which differs per rank). Plain tensors,
numbers and strings: loadable with `torch.load(..., weights_only=True)`.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

_EXPERT = re.compile(r"^(decoder\.layers\.\d+\.mlp\.experts\.local_experts\.)(\d+)(\..+)$")


def is_expert(name: str) -> bool:
    """A parameter of one routed expert (sharded by expert parallel)."""
    return _EXPERT.match(name) is not None


def global_name(name: str, ep_rank: int, local_experts: int) -> str:
    """The world-size-1 name of a parameter of rank `ep_rank`'s module."""
    found = _EXPERT.match(name)
    if found is None:
        return name
    head, index, tail = found.groups()
    return f"{head}{ep_rank * local_experts + int(index)}{tail}"


def named_state(
    module: nn.Module, optimizer: torch.optim.Optimizer, names: dict[str, str], keep: set[str]
) -> dict[str, Any]:
    """The part of the checkpoint this rank holds: weights and AdamW state of the
    parameters whose global name (`names`: local -> global) is in `keep`."""
    order = [names[n] for n, _ in module.named_parameters()]
    torch_state = optimizer.state_dict()
    (group,) = torch_state["param_groups"]  # one AdamW over all of the module's parameters
    return {
        "model": {
            names[n]: t.detach().clone()
            for n, t in module.state_dict().items()
            if torch.is_tensor(t) and names[n] in keep
        },
        "optimizer": {
            "state": {
                order[i]: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                for i, s in torch_state["state"].items()
                if order[i] in keep
            },
            "param_groups": [{**group, "params": [g for g in order if g in keep]}],
        },
    }


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole checkpoint from the ranks' `named_state` parts (disjoint by name)."""
    out: dict[str, Any] = {"model": {}, "optimizer": {"state": {}, "param_groups": []}}
    params: list[str] = []
    for part in parts:
        out["model"].update(part["model"])
        out["optimizer"]["state"].update(part["optimizer"]["state"])
        params += part["optimizer"]["param_groups"][0]["params"]
    (group,) = parts[0]["optimizer"]["param_groups"]
    out["optimizer"]["param_groups"] = [{**group, "params": params}]
    return out


def local_state(full: dict[str, Any], module: nn.Module, names: dict[str, str]) -> tuple:
    """(weights, torch optimiser state dict) of this rank's module from a whole
    checkpoint (`names`: local -> global). A checkpoint of torch's own optimiser layout
    (keyed by position; written by this engine before this layout) loads as it is."""
    weights = {n: full["model"][g] for n, g in names.items()}
    optim = full["optimizer"]
    (group,) = optim["param_groups"]
    if not all(isinstance(p, str) for p in group["params"]):
        return weights, optim
    order = [names[n] for n, _ in module.named_parameters()]
    missing = sorted(set(order) - set(group["params"]))
    if missing:
        raise ValueError(f"checkpoint without optimiser entries for {missing[:3]}")
    return weights, {
        "state": {i: optim["state"][g] for i, g in enumerate(order) if g in optim["state"]},
        "param_groups": [{**group, "params": list(range(len(order)))}],
    }
