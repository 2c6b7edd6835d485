"""The policy loss: MiniRL (arXiv 2512.01374 eq. 7) and the variants it is compared with.

    J_MiniRL = (1/B) Σ_i Σ_t M_t · sg[w_t] · Â_i · log π_θ(y_t),    w_t = ρ_t · r_t (eq. 5)

`policy_loss` returns −J, so that −B·∇loss = Σ_i Σ_t M·sg[w]·Â·∇log π_θ. Every variant
is one small function below, chosen in one `match` in `policy_loss`; `LossConfig` is the
only place with defaults. How each variant meets the inference engine:

- minirl: the weight is the full w_t = π_θ/μ_old of eq. 5, its IS policy applied to ρ_t
  (`is_cap_target="rho"`, default) or to w_t itself (`"w"`): the paper leaves it open.
  `is_policy="none"` leaves w_t = r_t: the paper's wo_train-infer-is ablation.
- reinforce: weight 1, no mask, no IS: Σ_t Â·log π_θ(y_t), the bare estimator. On-policy
  (r_t = 1, so M never fires) this equals the paper's wo_train-infer-is ablation.
- grpo, dapo, dr_grpo, gspo, cispo: decoupled, as verl's rollout correction and TIS do
  (Yao et al. 2025): the variant's own ratio is r = π_θ/π_old (the training engine on
  both sides) and the IS policy's factor sg[f(ρ)] multiplies each token's term.

What this module deliberately does not do: KL penalties to a reference model, entropy
bonuses, advantage estimation (see `advantages.py`), or any I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from minirl._checks import as_mask, check_advantages, check_finite, zero_padding
from minirl.aggregation import Aggregation, aggregate
from minirl.clipping import EPS_HIGH, EPS_LOW, clipped_region, ppo_clip
from minirl.is_weights import ICEPOP_BAND, TIS_CAP, TOKEN_LEVEL, ISPolicy, is_weight
from minirl.ratios import log_is_decomposition

Variant = Literal["minirl", "reinforce", "grpo", "dapo", "dr_grpo", "gspo", "cispo"]
VARIANTS: tuple[Variant, ...] = get_args(Variant)
CapTarget = Literal["rho", "w"]


@dataclass
class LossConfig:
    """Which objective, clip range and IS correction `policy_loss` uses."""

    variant: Variant = "minirl"
    """minirl (eq. 7); reinforce (no IS, no mask); grpo (PPO-clip, seq-mean-token-mean,
    Shao et al. 2024); dapo (PPO-clip-higher, token-mean, Yu et al. 2025); dr_grpo
    (PPO-clip, token sum / (B·dr_grpo_constant), Liu et al. 2025); gspo (clipped sequence
    ratio, Zheng et al. 2025); cispo (sg[clipped ratio] weight, token-mean, MiniMax 2025)."""
    eps_low: float = EPS_LOW
    """Lower clip ε_low: M_t = 0 when Â < 0 and r_t < 1 − ε_low. grpo uses it on both sides
    (GRPO's clip is symmetric); gspo's paper uses 3e-4 for its sequence ratio."""
    eps_high: float = EPS_HIGH
    """Upper clip ε_high: M_t = 0 when Â > 0 and r_t > 1 + ε_high (MiniRL 0.27, DAPO 0.28,
    GSPO 4e-4). Not used by grpo."""
    clip: bool = True
    """False is the paper's "without clipping" ablation: M_t never fires, PPO-clip becomes
    r·Â, CISPO's weight is not clipped."""
    is_policy: ISPolicy = "token_tis"
    """Training-inference IS correction: none | token_tis (min(ρ, is_cap)) | seq_tis |
    token_mis | seq_mis (ρ, 0 above band[1]) | icepop (ρ, 0 outside band). Not used by
    reinforce."""
    is_cap: float = TIS_CAP
    """Cap C of token_tis and seq_tis (MiniRL: 5)."""
    is_cap_target: CapTarget = "rho"
    """minirl only: apply the IS policy to ρ_t = π_old/μ_old (then w = f(ρ)·r) or to the
    full w_t = π_θ/μ_old. "w" needs a token-level is_policy."""
    band: tuple[float, float] = ICEPOP_BAND
    """(lo, hi) of the rejecting policies: icepop keeps lo ≤ ρ_t ≤ hi (IcePop's [0.5, 5]);
    token_mis and seq_mis reject ρ > hi only (Liu et al. 2025)."""
    length_norm: bool = False
    """minirl and reinforce only: divide each response's token sum by its length
    (seq-mean-token-mean): the paper's w_length-norm ablation, which breaks eq. 7."""
    dr_grpo_constant: float | None = None
    """dr_grpo only, and required there: the fixed constant that replaces |y_i| (Dr. GRPO
    uses the generation budget, e.g. the rollout's max_new_tokens)."""

    @property
    def clipped(self) -> bool:
        """Whether a clip rule can act: clipping on, in a variant that has one (reinforce
        has no ratio to clip)."""
        return self.clip and self.variant != "reinforce"

    def __post_init__(self) -> None:
        _check_choice("variant", self.variant, Variant)
        _check_choice("is_policy", self.is_policy, ISPolicy)
        _check_choice("is_cap_target", self.is_cap_target, CapTarget)
        for name in ("clip", "length_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"LossConfig.{name}={getattr(self, name)!r} must be true or false."
                )
        self.eps_low = _number("eps_low", self.eps_low, lo=0.0, hi=1.0, hi_open=True)
        self.eps_high = _number("eps_high", self.eps_high, lo=0.0)
        self.is_cap = _number("is_cap", self.is_cap, lo=0.0, lo_open=True)
        if not isinstance(self.band, tuple | list) or len(self.band) != 2:
            raise ValueError(f"LossConfig.band={self.band!r} must be a pair (lo, hi).")
        lo = _number("band[0]", self.band[0], lo=0.0)
        hi = _number("band[1]", self.band[1], lo=0.0, lo_open=True)
        if not lo < hi:
            raise ValueError(f"LossConfig.band={self.band!r} needs lo < hi.")
        self.band = (lo, hi)
        if self.length_norm and self.variant not in ("minirl", "reinforce"):
            raise ValueError(
                f"LossConfig.length_norm=True is defined for variant 'minirl' or 'reinforce', "
                f"not {self.variant!r}, whose aggregation is fixed by its paper."
            )
        if self.is_cap_target == "w" and (
            self.variant != "minirl" or self.is_policy not in TOKEN_LEVEL
        ):
            raise ValueError(
                f"LossConfig.is_cap_target='w' needs variant 'minirl' and a token-level "
                f"is_policy {TOKEN_LEVEL}, got {self.variant!r} and {self.is_policy!r}."
            )
        if self.variant == "dr_grpo":
            if self.dr_grpo_constant is None:
                raise ValueError(
                    "LossConfig.dr_grpo_constant is required for variant 'dr_grpo': "
                    "the generation budget in tokens (e.g. max_new_tokens)."
                )
            self.dr_grpo_constant = _number(
                "dr_grpo_constant", self.dr_grpo_constant, lo=0.0, lo_open=True
            )


def policy_loss(
    logp: torch.Tensor,  # [B, T] log π_θ of the sampled tokens (carries the gradient)
    logp_old: torch.Tensor,  # [B, T] log π_old, training engine at θ_old
    logp_rollout: torch.Tensor,  # [B, T] log μ_old, inference engine
    advantages: torch.Tensor,  # [B] one per response
    mask: torch.Tensor,  # [B, T] 1 on response tokens
    config: LossConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(loss, stats): loss = −J of `config.variant`, a scalar carrying the gradient of
    `logp` only; stats as python floats: staleness/{ratio_mean,ratio_min,ratio_max,kl_k3,
    mask_frac}, is/{weight_mean,weight_max,trunc_frac}, optim/loss (see `_stats`).

    B is the number of rows given. A trainer that splits a mini-batch into micro-batches
    scales each micro-batch's loss by B_micro / B_mini to keep MiniRL's 1/B_mini.
    """
    log_rho, log_r, log_w = log_is_decomposition(logp, logp_old, logp_rollout)  # checks shapes
    mask = as_mask(mask, logp.shape)
    check_advantages(advantages, logp.shape[0])
    for name, x in (("logp", logp), ("logp_old", logp_old), ("logp_rollout", logp_rollout)):
        check_finite(x, mask, name)
    logp = zero_padding(logp, mask)
    log_rho, log_r, log_w = (zero_padding(x, mask) for x in (log_rho, log_r, log_w))
    adv = advantages.detach().to(logp.dtype)[:, None]  # [B, 1]
    c = config

    factor, changed = is_weight(log_rho, mask, c.is_policy, c.is_cap, c.band)  # sg[f(ρ)]
    ratio = torch.exp(log_r)  # [B, T] r_t = π_θ/π_old, with gradient
    how: Aggregation
    match c.variant:
        case "minirl":
            if c.is_cap_target == "w":
                weight, changed = is_weight(log_w, mask, c.is_policy, c.is_cap, c.band)
            else:
                weight = factor * ratio.detach()
            obj, clipped = _minirl(logp, ratio, weight, adv, c)
            how = "seq_mean_token_mean" if c.length_norm else "token_sum"
        case "reinforce":
            obj, clipped = adv * logp, torch.zeros_like(mask)
            changed = torch.zeros_like(mask)
            how = "seq_mean_token_mean" if c.length_norm else "token_sum"
        case "grpo":
            obj, clipped = _ppo(ratio, factor, adv, c.eps_low, c.eps_low, c.clip)
            how = "seq_mean_token_mean"
        case "dapo":
            obj, clipped = _ppo(ratio, factor, adv, c.eps_low, c.eps_high, c.clip)
            how = "token_mean"
        case "dr_grpo":
            obj, clipped = _ppo(ratio, factor, adv, c.eps_low, c.eps_high, c.clip)
            how = "seq_mean_token_sum_norm"
        case "gspo":
            obj, clipped = _gspo(logp, log_r, mask, factor, adv, c)
            how = "seq_mean_token_mean"
        case "cispo":
            obj, clipped = _cispo(logp, ratio, factor, adv, c)
            how = "token_mean"
        case _:  # unreachable after LossConfig.__post_init__
            raise ValueError(f"variant={c.variant!r} is not one of {get_args(Variant)}.")
    loss = -aggregate(obj, mask, how, c.dr_grpo_constant)

    stats = _stats(loss, log_r, log_w, mask, clipped, changed)
    return loss, stats


# --- the variants: per-token objective [B, T] and the tokens clipping silenced -----------


def _minirl(logp, ratio, weight, adv, c: LossConfig):
    """M_t · sg[w_t] · Â · log π_θ(y_t). MiniRL, arXiv 2512.01374 eq. 7."""
    clipped = _region(ratio.detach(), adv, c.eps_low, c.eps_high, c.clip)
    return torch.where(clipped, 0.0, weight.detach() * adv * logp), clipped


def _ppo(ratio, factor, adv, eps_low, eps_high, clip: bool):
    """sg[f(ρ)] · min(r Â, clip(r) Â) with r = π_θ/π_old: the PPO-clip term of GRPO
    (arXiv 2402.03300), DAPO's clip-higher (arXiv 2503.14476), Dr. GRPO (arXiv 2503.20783)."""
    surrogate = ppo_clip(ratio, adv, eps_low, eps_high) if clip else ratio * adv
    clipped = _region(ratio.detach(), adv, eps_low, eps_high, clip)
    return factor * surrogate, clipped


def _gspo(logp, log_r, mask, factor, adv, c: LossConfig):
    """sg[f(ρ)] · min(s Â, clip(s) Â) with s_i = (Π_t r_t)^(1/|y_i|): GSPO (arXiv 2507.18071)
    in its GSPO-token form s_{i,t} = sg[s_i] · π_θ(y_t)/sg[π_θ(y_t)], whose value and
    gradient equal sequence-level GSPO's under seq-mean-token-mean. A token-level IS factor
    then weighs each token's own gradient (as verl's rollout correction does); a
    sequence-level one (seq_tis, seq_mis) keeps GSPO's gradient exactly."""
    lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)  # [B, 1]
    log_s = log_r.sum(dim=1, keepdim=True) / lengths  # [B, 1] log s_i
    s_tok = torch.exp(log_s.detach() + logp - logp.detach())  # [B, T], value s_i
    surrogate = ppo_clip(s_tok, adv, c.eps_low, c.eps_high) if c.clip else s_tok * adv
    clipped = _region(torch.exp(log_s.detach()), adv, c.eps_low, c.eps_high, c.clip)
    return factor * surrogate, clipped.expand_as(mask) & mask


def _cispo(logp, ratio, factor, adv, c: LossConfig):
    """sg[clip(r, 1 − ε_low, 1 + ε_high) · f(ρ)] · Â · log π_θ(y_t): CISPO (MiniMax-M1,
    arXiv 2506.13585). The weight is clipped; no token loses its gradient."""
    r = ratio.detach()
    weight = torch.clamp(r, 1.0 - c.eps_low, 1.0 + c.eps_high) if c.clip else r
    clipped = (
        ((r < 1.0 - c.eps_low) | (r > 1.0 + c.eps_high))
        if c.clip
        else torch.zeros_like(r, dtype=torch.bool)
    )
    return (weight * factor).detach() * adv * logp, clipped


def _region(ratio, adv, eps_low, eps_high, clip: bool) -> torch.Tensor:
    if not clip:  # adv is [B, 1], so the region has ratio's shape
        return torch.zeros_like(ratio, dtype=torch.bool)
    return clipped_region(ratio, adv, eps_low, eps_high)


# --- statistics, under no_grad, as python floats ----------------------------------------


@torch.no_grad()
def _stats(loss, log_r, log_w, mask, clipped, changed) -> dict[str, float]:
    """staleness/* of r_t, is/* of the raw w_t = π_θ/μ_old, shares over response tokens.

    `staleness/mask_frac` is the share of tokens whose gradient clipping removed (M_t = 0;
    for cispo: whose weight was clipped); `is/trunc_frac` the share the IS policy truncated
    or rejected (all tokens of an affected response for sequence-level policies).
    """
    n = mask.sum().to(torch.float64)
    lr = log_r.detach().to(torch.float64)[mask]  # [N]
    r = torch.exp(lr)
    w = torch.exp(log_w.detach().to(torch.float64)[mask])
    values = torch.stack(
        [
            r.mean(),
            r.min(),
            r.max(),
            (r - 1.0 - lr).mean(),  # k3 estimator of KL(π_old ‖ π_θ), Schulman 2020
            (clipped & mask).sum() / n,
            w.mean(),
            w.max(),
            (changed & mask).sum() / n,
            loss.detach().to(torch.float64),
        ]
    ).tolist()
    names = (
        "staleness/ratio_mean",
        "staleness/ratio_min",
        "staleness/ratio_max",
        "staleness/kl_k3",
        "staleness/mask_frac",
        "is/weight_mean",
        "is/weight_max",
        "is/trunc_frac",
        "optim/loss",
    )
    return dict(zip(names, values, strict=True))


def _check_choice(name: str, value: object, kind: object) -> None:
    allowed = get_args(kind)
    if value not in allowed:
        raise ValueError(
            f"LossConfig.{name}={value!r} is not one of {', '.join(map(repr, allowed))}."
        )


def _number(
    name: str,
    value: object,
    lo: float,
    hi: float = math.inf,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """A finite float in the given range, or an error naming the field and the range."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > lo if lo_open else value >= lo) and (value < hi if hi_open else value <= hi)
    if not ok:
        left, right = "(" if lo_open else "[", ")" if hi_open or hi == math.inf else "]"
        raise ValueError(
            f"LossConfig.{name}={value!r} must be a number in {left}{lo}, {hi}{right}."
        )
    return float(value)
