"""minirl: the mathematics of MiniRL (Qwen team, arXiv 2512.01374) as pure tensor functions.

One concept per file: the IS decomposition (`ratios`), IS policies (`is_weights`), clipping
(`clipping`), batch constants (`aggregation`), the policy loss and its variants (`loss`),
advantages (`advantages`), the sequence-level probe (`sequence`) and the diagnostics
(`mismatch`, `approx`, `entropy`, `routing`). Imports torch only: no I/O, no logging, no
config files, nothing of the trainer or the monitor.
"""

from minirl.advantages import group_advantages
from minirl.aggregation import Aggregation, aggregate
from minirl.approx import approx_residual
from minirl.clipping import clipped_region, minirl_mask, ppo_clip
from minirl.entropy import entropy_metrics, token_entropy
from minirl.is_weights import ISPolicy, is_weight
from minirl.loss import LossConfig, Variant, policy_loss
from minirl.mismatch import mismatch_metrics
from minirl.ratios import log_is_decomposition
from minirl.routing import HEADLINE_PAIR, routing_metrics
from minirl.sequence import grad_cosine, sequence_is_loss

__all__ = [
    "HEADLINE_PAIR",
    "Aggregation",
    "ISPolicy",
    "LossConfig",
    "Variant",
    "aggregate",
    "approx_residual",
    "clipped_region",
    "entropy_metrics",
    "grad_cosine",
    "group_advantages",
    "is_weight",
    "log_is_decomposition",
    "minirl_mask",
    "mismatch_metrics",
    "policy_loss",
    "ppo_clip",
    "routing_metrics",
    "sequence_is_loss",
    "token_entropy",
]
