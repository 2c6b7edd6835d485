"""How per-token objectives become one number: the batch constant of each variant.

    token_sum                 (1/B) Σ_i Σ_t            MiniRL eq. 7: no length normalisation
    seq_mean_token_mean       (1/B) Σ_i (1/|y_i|) Σ_t  GRPO; MiniRL's w_length-norm ablation
    token_mean                (1/Σ_i |y_i|) Σ_i Σ_t    DAPO, CISPO
    seq_mean_token_sum_norm   (1/(B·C)) Σ_i Σ_t        Dr. GRPO, C a fixed constant

B is the number of responses (rows), |y_i| the response lengths. Only token_sum and
seq_mean_token_sum_norm give every token a weight that does not depend on any length;
this is what the first-order approximation needs (arXiv 2512.01374, section on length
normalisation). This module does not choose a mode; `loss.py` does.
"""

from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["token_sum", "seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]


def aggregate(
    per_token: torch.Tensor,  # [B, T], 0 on padding
    mask: torch.Tensor,  # [B, T] bool
    how: Aggregation,
    constant: float | None = None,
) -> torch.Tensor:
    """Scalar reduction of `per_token` by one of the four batch constants above."""
    x = torch.where(mask, per_token, 0.0)
    batch = x.shape[0]
    match how:
        case "token_sum":
            return x.sum() / batch
        case "seq_mean_token_mean":
            lengths = mask.sum(dim=1).clamp(min=1).to(x.dtype)  # [B]; an empty row adds 0
            return (x.sum(dim=1) / lengths).sum() / batch
        case "token_mean":
            return x.sum() / mask.sum().to(x.dtype)
        case "seq_mean_token_sum_norm":
            if constant is None or not constant > 0:
                raise ValueError(f"constant must be a positive number, got {constant!r}.")
            return x.sum() / (batch * constant)
        case _:
            raise ValueError(f"how={how!r} is not one of {Aggregation.__args__}.")
