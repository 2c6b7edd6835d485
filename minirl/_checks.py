"""Input checks shared by every public function of `minirl`.

Each check raises `ValueError` with one sentence that names the bad argument. Values
under mask = 0 (padding) are never inspected: engines leave anything there, including
-inf and NaN. This module checks and sanitises; it computes nothing of the paper.
"""

from __future__ import annotations

import torch


def as_mask(
    mask: torch.Tensor, shape: torch.Size | None = None, name: str = "mask"
) -> torch.Tensor:
    """Return `mask` as a bool tensor after checking it holds only 0/1 and is not empty."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(mask).__name__}.")
    if shape is not None and mask.shape != shape:
        raise ValueError(f"{name} has shape {tuple(mask.shape)} but expected {tuple(shape)}.")
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError(f"{name} must contain only 0 and 1.")
        mask = mask != 0
    if not bool(mask.any()):
        raise ValueError(f"{name} is empty: no token has {name} = 1.")
    return mask


def check_tokens(x: torch.Tensor, name: str, ndim: int = 2) -> None:
    """A floating tensor of per-token values with `ndim` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}.")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}.")


def check_same_shape(ref: torch.Tensor, ref_name: str, **others: torch.Tensor) -> None:
    for name, x in others.items():
        if x.shape != ref.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but {ref_name} has {tuple(ref.shape)}."
            )


def check_finite(x: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    """Non-finite values are an error where mask = 1 and ignored elsewhere."""
    bad = ~torch.isfinite(x.detach()) & mask
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name} is not finite at {where} where mask = 1.")


def zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x with 0 under mask = 0, so padding (even NaN) reaches neither values nor grads."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def check_advantages(advantages: torch.Tensor, batch: int) -> None:
    if not isinstance(advantages, torch.Tensor):
        raise ValueError(f"advantages must be a torch.Tensor, got {type(advantages).__name__}.")
    if advantages.shape != (batch,):
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)} but expected ({batch},): "
            "one advantage per response."
        )
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages contains a non-finite value.")
