"""Routing mismatch of a Mixture-of-Experts policy, from two engines' top-k expert indices.

MiniRL, arXiv 2512.01374 eq. 6: in an MoE the token weight also depends on which experts
were routed, e^π vs e^μ. Given top-k index tensors [B, T, L, k] of two engines (-1 =
unknown), one call compares one pair. Only (token, layer) entries with mask = 1 and all k
indices known on both sides count. A call with `name=N` returns

    routing/N                         share of (token, layer) whose top-k SET differs
    routing/N/layer<i>                the same, per layer i (layers with no known entry omitted)
    routing/N/overlap                 mean |A ∩ B| / k over (token, layer)
    routing/N/tokens_any_layer_diff   share of tokens whose set differs in any layer
    routing/N/load_cv                 coefficient of variation (std/mean over experts) of
                                      the expert load of experts_a, averaged over layers

and, only when N == "mismatch_train_infer" (the headline pair e^π_old vs e^μ_old), the same
three summaries under the unsuffixed names `routing/overlap`,
`routing/tokens_any_layer_diff`, `routing/load_cv`. So the trainer can call it for the
train-infer pair and for the stale pair (N = "mismatch_stale") and merge both dicts without
a collision. This module does not capture or replay routing; the engines do.
"""

from __future__ import annotations

import torch

from core.vocabulary import REPLAY_MODES, ReplayMode
from minirl._checks import as_mask

__all__ = ["REPLAY_MODES", "ReplayMode"]  # the modes (core.vocabulary) the trainer replays

HEADLINE_PAIR = "mismatch_train_infer"
"""The pair whose summaries also appear under the unsuffixed canonical names."""


@torch.no_grad()
def routing_metrics(
    experts_a: torch.Tensor,  # [B, T, L, k] long expert ids, -1 unknown
    experts_b: torch.Tensor,  # [B, T, L, k]
    mask: torch.Tensor,  # [B, T] 1 on response tokens
    num_experts: int,
    name: str,
) -> dict[str, float]:
    """The routing/<name>* metrics above, as python floats."""
    _check_shape(experts_a, "experts_a", num_experts)
    _check_shape(experts_b, "experts_b", num_experts)
    if experts_b.shape != experts_a.shape:
        raise ValueError(
            f"experts_b has shape {tuple(experts_b.shape)} but experts_a has "
            f"{tuple(experts_a.shape)}."
        )
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name must be a non-empty string without '/', got {name!r}.")
    mask = as_mask(mask, experts_a.shape[:2])
    _check_ids(experts_a, "experts_a", mask, num_experts)
    _check_ids(experts_b, "experts_b", mask, num_experts)
    k = experts_a.shape[-1]
    known_a = (experts_a >= 0).all(dim=-1)  # [B, T, L]
    valid = known_a & (experts_b >= 0).all(dim=-1) & mask[:, :, None]  # [B, T, L]
    if not bool(valid.any()):
        raise ValueError("no (token, layer) has known experts on both sides where mask = 1.")

    a, b = experts_a.sort(dim=-1).values, experts_b.sort(dim=-1).values
    differs = (a != b).any(dim=-1) & valid  # [B, T, L]: sorted sets differ
    shared = torch.zeros(valid.shape, dtype=torch.long, device=valid.device)  # [B, T, L] |A∩B|
    for j in range(k):  # k passes of [B, T, L, k] instead of one [B, T, L, k, k] temporary
        shared += (experts_a[..., j : j + 1] == experts_b).any(dim=-1)
    n_valid = valid.sum()
    per_layer_valid = valid.sum(dim=(0, 1))  # [L]
    per_layer = differs.sum(dim=(0, 1)) / per_layer_valid.clamp(min=1)
    tokens = valid.any(dim=-1)  # [B, T]
    out = {
        f"routing/{name}": float(differs.sum() / n_valid),
        f"routing/{name}/overlap": float(shared[valid].double().mean() / k),
        f"routing/{name}/tokens_any_layer_diff": float(differs.any(dim=-1)[tokens].double().mean()),
        f"routing/{name}/load_cv": _load_cv(experts_a, known_a & mask[:, :, None], num_experts),
    }
    for i, (frac, n) in enumerate(zip(per_layer.tolist(), per_layer_valid.tolist(), strict=True)):
        if n > 0:
            out[f"routing/{name}/layer{i}"] = frac
    if name == HEADLINE_PAIR:
        for key in ("overlap", "tokens_any_layer_diff", "load_cv"):
            out[f"routing/{key}"] = out[f"routing/{name}/{key}"]
    return out


def _load_cv(experts: torch.Tensor, valid: torch.Tensor, num_experts: int) -> float:
    """Mean over layers of std/mean of the per-expert selection counts (population std).
    Layers with no known entry are skipped."""
    layers = experts.shape[2]
    ids = torch.where(valid[..., None], experts, -1)  # [B, T, L, k]
    layer = torch.arange(layers, device=experts.device)[None, None, :, None]
    flat = (layer * num_experts + ids)[ids >= 0]  # [n] one id per (layer, expert)
    counts = torch.bincount(flat, minlength=layers * num_experts)
    counts = counts.view(layers, num_experts).to(torch.float64)  # [L, E]
    used = counts.sum(dim=1) > 0
    cv = counts.std(dim=1, correction=0) / counts.mean(dim=1)
    return float(cv[used].mean())


def _check_shape(experts: torch.Tensor, name: str, num_experts: int) -> None:
    if not isinstance(num_experts, int) or isinstance(num_experts, bool) or num_experts < 1:
        raise ValueError(f"num_experts must be a positive int, got {num_experts!r}.")
    if not isinstance(experts, torch.Tensor) or experts.ndim != 4:
        shape = tuple(experts.shape) if isinstance(experts, torch.Tensor) else type(experts)
        raise ValueError(f"{name} must be a [B, T, L, k] tensor, got {shape}.")
    if experts.is_floating_point() or experts.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer expert ids, got {experts.dtype}.")


def _check_ids(experts: torch.Tensor, name: str, mask: torch.Tensor, num_experts: int) -> None:
    """Ids in [-1, E) and no repeat within a top-k set, checked where mask = 1 only."""
    e = experts[mask]  # [N, L, k]
    if bool(((e < -1) | (e >= num_experts)).any()):
        raise ValueError(f"{name} holds an id outside [-1, {num_experts - 1}] where mask = 1.")
    s = e.sort(dim=-1).values
    if bool(((s[..., 1:] == s[..., :-1]) & (s[..., 1:] >= 0)).any()):
        raise ValueError(f"{name} repeats an expert within one top-k set.")
