"""One MiniRL step, read top to bottom (MiniRL, arXiv 2512.01374, Algorithm + eq. 7).

    rollout (μ_old) → reward → advantages → θ_old pass (π_old) → N mini-batch updates (π_θ)
    → diagnostics

Notation of the paper: μ_old is the inference engine at θ_old, π_old the training engine
at θ_old, π_θ the training engine during the updates. ρ_t = π_old/μ_old is the
training-inference factor, r_t = π_θ/π_old the staleness factor, w_t = ρ_t·r_t (eq. 5).
Routing Replay: R2 routes the updates through e^π_old (the θ_old pass), R3 through e^μ_old
(the inference engine), both the θ_old pass and the updates.

This function does not sync weights, evaluate, checkpoint or talk to the monitor: the loop
(`trainer/run.py`) does, around it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from minirl import (
    approx_residual,
    entropy_metrics,
    grad_cosine,
    group_advantages,
    mismatch_metrics,
    policy_loss,
    routing_metrics,
    sequence_is_loss,
)
from trainer.controls import Controls
from trainer.engines.base import InferenceEngine, Rollout, SamplingParams
from trainer.engines.training import TrainingEngine
from trainer.evaluate import encode_prompts, response_texts
from trainer.tasks import Example, Task


class NonFiniteBatch(RuntimeError):
    """The step met NaN/inf log-probabilities: the policy (or an engine) has diverged.
    The loop records it as a non-finite step and rolls back or stops; it never trains on it."""


@dataclass
class StepResult:
    """What one step measured: canonical scalars and raw per-token distributions."""

    scalars: dict[str, float] = field(default_factory=dict)
    distributions: dict[str, list[float]] = field(default_factory=dict)


def rl_step(
    examples: Sequence[Example],
    policy: TrainingEngine,
    engine: InferenceEngine,
    task: Task,
    controls: Controls,
    sampling: SamplingParams,
    *,
    seed: int,
    advantage_baseline: str = "mean",
    advantage_std_norm: bool = False,
    diagnostics: bool = True,
    probe_grad_cosine: bool = False,
) -> StepResult:
    """One rollout and its N = controls.mini_batches updates; returns the step's metrics."""
    t_step = time.perf_counter()
    tok = policy.tokenizer
    n = sampling.n
    moe = policy.is_moe

    # ---- 1. rollout from μ_old: tokens, log μ_old(y_t), routing e^μ ----------------------
    t0 = time.perf_counter()
    rollout = engine.generate(encode_prompts(tok, [ex.prompt for ex in examples]), sampling, seed)
    rollout_s = time.perf_counter() - t0
    ids, attn, mask = rollout.input_ids, rollout.attention_mask, rollout.response_mask
    logp_mu = rollout.logp  # [B, S]
    _check_rollout(rollout, len(examples) * n)

    # ---- 2. reward: the verifier on each response's text -----------------------------------
    texts = response_texts(tok, rollout)
    rewards = torch.tensor(
        [task.reward(text, examples[i // n].answer) for i, text in enumerate(texts)],
        dtype=torch.float32,
    )  # [B]

    # ---- 3. advantages: Â = R − mean_group(R) (eq. 7; no std division by default) --------
    adv = group_advantages(rewards, n, advantage_baseline, advantage_std_norm)  # [B]

    # ---- 4. θ_old pass: log π_old, entropy at the rollout prefixes, routing e^π_old --------
    t0 = time.perf_counter()
    replay_mu = rollout.routing if (moe and controls.routing_replay == "R3") else None
    with torch.no_grad():
        logp_old, entropy, routing_old = policy.forward_logprobs(
            ids, attn, mask, replay=replay_mu, record=moe, with_entropy=True
        )  # routing_old: the live choice at θ_old (e^π_old), even under R3
    _check_finite(logp_old, mask, "the training engine's log π_old")

    # ---- 5. N mini-batch updates of π_θ (N = global/mini; whole prompt groups each) -------
    groups = len(examples)
    per_mb = groups // controls.mini_batches
    mb_stats: list[tuple[int, dict[str, float]]] = []
    log_r_all = torch.zeros_like(logp_old)  # [B, S] log π_θ − log π_old at each update
    routing_now = torch.full_like(routing_old, -1) if routing_old is not None else None
    optim: list[dict[str, float]] = []
    cosine = float("nan")
    for m in range(controls.mini_batches):
        rows = slice(m * per_mb * n, (m + 1) * per_mb * n)
        replay = {"none": None, "R2": routing_old, "R3": rollout.routing}[controls.routing_replay]
        logp, _, routed = policy.forward_logprobs(
            ids[rows],
            attn[rows],
            mask[rows],
            replay=replay[rows] if (moe and replay is not None) else None,
            record=moe and diagnostics,
        )
        _check_finite(logp.detach(), mask[rows], f"log π_θ in update {m + 1}")
        loss, stats = policy_loss(
            logp, logp_old[rows], logp_mu[rows], adv[rows], mask[rows], controls.loss
        )  # −J/B_mb, MiniRL eq. 7 (or the configured variant)
        if probe_grad_cosine and m == controls.mini_batches - 1:
            # approx/grad_cosine: token surrogate (eq. 3-4) vs sequence-level IS (eq. 1-2)
            params = [p for p in policy.model.parameters() if p.requires_grad]
            g_token = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
            seq = sequence_is_loss(logp, logp_mu[rows], adv[rows], mask[rows])
            g_seq = torch.autograd.grad(seq, params, allow_unused=True)
            if torch.isfinite(seq):
                cosine = grad_cosine(list(g_token), list(g_seq))
            for p, g in zip(params, g_token, strict=True):
                p.grad = g
            optim.append(policy.step(None))
        else:
            optim.append(policy.step(loss))
        mb_stats.append((int(mask[rows].sum()), stats))
        log_r_all[rows] = (logp.detach() - logp_old[rows]) * mask[rows]
        if routed is not None and routing_now is not None:
            routing_now[rows] = routed
    train_s = time.perf_counter() - t0

    # ---- 6. diagnostics: is the token surrogate still a first-order approximation? -------
    t0 = time.perf_counter()
    out = StepResult()
    s = out.scalars
    s.update(_merge_minibatch_stats(mb_stats))
    s["optim/grad_norm"] = max(o["optim/grad_norm"] for o in optim)
    s["optim/lr"] = optim[-1]["optim/lr"]
    s.update(_outcome_metrics(rewards, n, mask, rollout.truncated))
    if diagnostics:
        log_rho = (logp_old - logp_mu) * mask  # [B, S] log ρ_t
        s.update(mismatch_metrics(logp_old, logp_mu, mask))
        s.update(approx_residual(log_rho + log_r_all, mask))  # log w_t = log ρ_t + log r_t
        s.update(entropy_metrics(entropy, mask))
        if moe and rollout.routing is not None:
            scored = _scoring_positions(mask)  # forwards whose logits score a response token
            experts = _num_experts(policy)
            # e^π_old vs e^μ_old (train-inference), e^π_θ vs e^π_old (staleness)
            e_mu, e_old, e_now = rollout.routing, routing_old, routing_now
            s.update(routing_metrics(e_old, e_mu, scored, experts, "mismatch_train_infer"))
            if e_now is not None:
                s.update(routing_metrics(e_now, e_old, scored, experts, "mismatch_stale"))
        keep = mask > 0
        out.distributions = {
            "mismatch/log_ratio": log_rho[keep].tolist(),
            "staleness/log_ratio": log_r_all[keep].tolist(),
            "policy/entropy": entropy[keep].tolist(),
        }
    elif entropy is not None:
        s.update(entropy_metrics(entropy, mask))
    if probe_grad_cosine and cosine == cosine:  # not NaN: there was a direction to compare
        s["approx/grad_cosine"] = cosine
    diag_s = time.perf_counter() - t0

    step_s = time.perf_counter() - t_step
    s["perf/rollout_s"] = rollout_s
    s["perf/train_s"] = train_s
    s["perf/diag_s"] = diag_s
    s["perf/step_s"] = step_s
    s["perf/tokens_per_s"] = float(attn.sum()) / max(step_s, 1e-9)
    return out


# --------------------------------------------------------------------------- helpers


def _check_rollout(rollout: Rollout, expected_rows: int) -> None:
    """An engine that returns the wrong batch would poison every metric: fail loudly."""
    if rollout.batch_size != expected_rows:
        raise RuntimeError(
            f"inference engine returned {rollout.batch_size} rows, expected {expected_rows}"
        )
    _check_finite(rollout.logp, rollout.response_mask, "the inference engine's log μ_old")


def _check_finite(x: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(x) & (mask > 0)
    if bool(bad.any()):
        raise NonFiniteBatch(f"{what} is non-finite on {int(bad.sum())} response tokens")


def _scoring_positions(mask: torch.Tensor) -> torch.Tensor:
    """[B, S]: 1 at position j when token j+1 is a response token (the forward at j
    computes the logits that score it), so routing is compared where it matters."""
    out = torch.zeros_like(mask)
    out[:, :-1] = mask[:, 1:]
    return out


def _num_experts(policy: TrainingEngine) -> int:
    cfg = policy.model.config
    return int(getattr(cfg, "num_experts", None) or cfg.num_local_experts)


def _merge_minibatch_stats(mb_stats: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """policy_loss stats of the N updates as one step: min of *_min, max of *_max, and
    token-weighted means of the rest (optim/loss: the plain mean over updates)."""
    total = sum(w for w, _ in mb_stats) or 1
    out: dict[str, float] = {}
    for key in mb_stats[0][1]:
        values = [st[key] for _, st in mb_stats]
        if key.endswith("_min"):
            out[key] = min(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        elif key == "optim/loss":
            out[key] = sum(values) / len(values)
        else:
            out[key] = sum(w * st[key] for w, st in mb_stats) / total
    return out


def _outcome_metrics(
    rewards: torch.Tensor, n: int, mask: torch.Tensor, truncated: torch.Tensor
) -> dict[str, float]:
    """reward/* and response/* of DESIGN.md's table."""
    groups = rewards.view(-1, n)
    all_equal = groups.max(dim=1).values == groups.min(dim=1).values  # [G]: Â = 0 for the group
    lengths = mask.sum(dim=1).to(torch.float64)
    return {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std(unbiased=False)),
        "reward/acc": float((rewards > 0.5).double().mean()),
        "reward/zero_adv_group_frac": float(all_equal.double().mean()),
        "response/len_mean": float(lengths.mean()),
        "response/len_max": float(lengths.max()),
        "response/trunc_frac": float(truncated.double().mean()),
    }
