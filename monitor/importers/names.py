"""Peer trainers' metric names mapped onto ours: one canonical name per metric.

A name is mapped only where the peer measures the same quantity as our canonical metric,
or one close enough to sit on the same chart; where it differs (estimator, aggregation,
truncation) the comment says how. Names not listed here are kept as they are: an
imported run loses nothing, it only gains comparability. Each block cites the source file
the names were read from (public repositories, read through the project's search tool).

This module deliberately does not rescale or transform values: a mapping is a rename.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Mapping

from core.errors import UserError

# verl (volcengine/verl) -------------------------------------------------------------------
# verl/trainer/ppo/rollout_corr_helper.py, compute_offpolicy_metrics(): log_ratio =
# old_log_prob − rollout_log_prob = ℓ_t, metrics prefixed "rollout_corr/".
_VERL = {
    # kl = mean(rollout_lp − old_lp) = mean(−ℓ): KL(μ_old‖π_old), k1 — the paper's metric.
    "rollout_corr/kl": "mismatch/kl_k1",
    # k3_kl = mean(exp(ℓ) − ℓ − 1), same estimator as ours.
    "rollout_corr/k3_kl": "mismatch/kl_k3",
    # chi2_token = E[ρ²] − 1; chi2_seq = E[(Π ρ_t)²] − 1 (verl clamps log ρ at ±20).
    "rollout_corr/chi2_token": "mismatch/chi2_token",
    "rollout_corr/chi2_seq": "mismatch/chi2_seq",
    # ESS of the (truncated, when rollout_is is on) weights, 1 / E[(w/E[w])²], as a fraction.
    "rollout_corr/rollout_is_eff_sample_size": "mismatch/ess",
    # The same metrics under their names of October 2025 (verl/trainer/ppo/mismatch_helper.py,
    # compute_mismatch_metrics() and compute_rollout_importance_weights(), prefixed
    # "mismatch/"): mismatch_kl = mean(rollout_lp − old_lp), k1; mismatch_k3_kl = k3; the ESS
    # of the weights clamped to the thresholds, as a fraction. Its rollout_is_max/min are
    # per token or per sequence depending on rollout_is_level, so they are not mapped.
    "mismatch/mismatch_kl": "mismatch/kl_k1",
    "mismatch/mismatch_k3_kl": "mismatch/kl_k3",
    "mismatch/rollout_is_eff_sample_size": "mismatch/ess",
    # verl/utils/debug/metrics.py, calculate_debug_metrics(): Pearson correlation of the token
    # probabilities, rollout vs actor (old) — our prob_corr.
    "training/rollout_actor_probs_pearson_corr": "mismatch/prob_corr",
    # verl/trainer/ppo/ray_trainer.py (when the rollout returns its log-probs): mean over
    # response tokens of |exp(rollout_lp) − exp(old_lp)| = |μ_old − π_old|. The max and std
    # beside it are not mapped: our max_abs_prob_diff is a per-response max, averaged.
    "training/rollout_probs_diff_mean": "mismatch/prob_abs_diff",
    # verl/workers/actor/dp_actor.py + verl/trainer/ppo/core_algos.py (vanilla policy loss):
    # entropy of π_θ on response tokens.
    "actor/entropy": "policy/entropy",
    # verl/trainer/ppo/ray_trainer.py, fit() of the 2025 releases: agg_loss of the entropies
    # the old-log-prob pass returns, named for the loss term it feeds: the entropy itself.
    "actor/entropy_loss": "policy/entropy",
    # pg_clipfrac: share of tokens where the clipped term wins, i.e. (Â>0, r>1+ε) or (Â<0,
    # r<1−ε) — our M_t = 0 share. (Some newer verl loss modes count |r−1|>ε regardless of
    # the sign of Â: an upper bound on ours.)
    "actor/pg_clipfrac": "staleness/mask_frac",
    # ppo_kl = mean(log π_old − log π_θ): k1 of KL(π_old‖π_θ). Ours is k3, so it gets a k1 name.
    "actor/ppo_kl": "staleness/kl_k1",
    "actor/grad_norm": "optim/grad_norm",
    "actor/pg_loss": "optim/loss",
    "actor/lr": "optim/lr",
    # verl/trainer/ppo/metric_utils.py, compute_data_metrics(): sequence score = verifier reward.
    "critic/score/mean": "reward/mean",
    "response_length/mean": "response/len_mean",
    "response_length/max": "response/len_max",
    # clip_ratio = share of responses that hit the max response length.
    "response_length/clip_ratio": "response/trunc_frac",
    # compute_timing_metrics() / compute_throughout_metrics()
    "timing_s/step": "perf/step_s",
    "timing_s/gen": "perf/rollout_s",
    "timing_s/update_actor": "perf/train_s",
    "perf/time_per_step": "perf/step_s",
}

# TRL (huggingface/trl) --------------------------------------------------------------------
# trl/trainer/grpo_trainer.py, self._metrics[...] keys (also seen verbatim in the
# `log_history` of trainer_state.json files published with GRPO checkpoints).
_TRL = {
    # importance_sampling_ratio = exp(old_per_token_logps − sampling_per_token_logps) = ρ_t,
    # logged AFTER the TIS cap (vllm_importance_sampling_mode "token_truncate", the
    # default) or the mask (*_mask modes zero the ratios above the cap): max ≤ cap.
    "sampling/importance_sampling_ratio/min": "mismatch/ratio_min",
    "sampling/importance_sampling_ratio/mean": "mismatch/ratio_mean",
    "sampling/importance_sampling_ratio/max": "mismatch/ratio_max",
    # sampling_logp_difference = |old − sampling| per token: mean and max of |ℓ_t|. No
    # canonical name of ours; shared with slime's train_rollout_logprob_abs_diff below.
    "sampling/sampling_logp_difference/mean": "mismatch/logprob_abs_diff",
    "sampling/sampling_logp_difference/max": "mismatch/logprob_abs_diff_max",
    # clip_ratio/region_mean: tokens with (r < 1−ε_low and Â < 0) or (r > 1+ε_high and Â > 0)
    # — exactly our M_t = 0 share.
    "clip_ratio/region_mean": "staleness/mask_frac",
    "entropy": "policy/entropy",
    "reward": "reward/mean",
    # frac_reward_zero_std: share of groups whose rewards are all equal (zero advantage).
    "frac_reward_zero_std": "reward/zero_adv_group_frac",
    "completions/mean_length": "response/len_mean",
    "completions/max_length": "response/len_max",
    # clipped_ratio: share of completions that hit max_completion_length.
    "completions/clipped_ratio": "response/trunc_frac",
    "grad_norm": "optim/grad_norm",
    "loss": "optim/loss",
    "learning_rate": "optim/lr",
    # Not mapped: "reward_std" is the mean over groups of the within-group std, not the
    # batch std; "kl" is the KL to the reference model, which MiniRL does not use.
}

# slime (THUDM/slime) ----------------------------------------------------------------------
# slime/backends/megatron_utils/loss.py, policy_loss_function(): reported_loss keys, logged
# with the "train/" prefix by the actor.
_SLIME = {
    # sum_of_sample_mean(|old_log_probs − rollout_log_probs|): per-response mean of |ℓ_t|,
    # then mean over responses. TRL's sampling_logp_difference/mean is the token mean.
    "train/train_rollout_logprob_abs_diff": "mismatch/logprob_abs_diff",
    # entropy_loss = sum_of_sample_mean(entropy): the entropy itself, not a loss term.
    "train/entropy_loss": "policy/entropy",
    "train/pg_clipfrac": "staleness/mask_frac",
    # ppo_kl = old_log_probs − log_probs, k1 (as verl's).
    "train/ppo_kl": "staleness/kl_k1",
    "train/grad_norm": "optim/grad_norm",
    "train/loss": "optim/loss",
    "rollout/raw_reward": "reward/mean",
    "rollout/truncated_ratio": "response/trunc_frac",
}

# slime's train-inference mismatch helper (THUDM/slime, examples/train_infer_mismatch_helper/
# mis.py, the custom TIS function of `--get-mismatch-metrics` / `--use-tis`): its metrics
# get the "mis_" prefix, and the actor logs them under "train/" like the rest of loss.py's.
_SLIME_MIS = {
    # kl = mean(rollout_lp − train_lp): k1 of KL(μ_old‖π_old), as verl's rollout_corr/kl.
    "train/mis_kl": "mismatch/kl_k1",
    # k3_kl = mean(exp(ℓ) − ℓ − 1), ℓ = train_lp − rollout_lp: ours.
    "train/mis_k3_kl": "mismatch/kl_k3",
    # Not mapped: the perplexity metrics (log_ppl_diff...) are per-sequence means of ℓ, not
    # token statistics of ours; mean_is_weight_before_clip is the mean of ρ (or of its
    # sequence product or geometric mean, by mis_level).
}

# ms-swift (modelscope/ms-swift, GRPO since 3.11) ---------------------------------------------
# docs/source_en/Instruction/GRPO/AdvancedResearch/training_inference_mismatch.md, "Metrics":
# logged with the "rollout_correction/" prefix (and, through Hugging Face's Trainer, "train/"
# in W&B and TensorBoard, as TRL's). Its other names are TRL's.
_MS_SWIFT = {
    # k3_kl = E_μ[ρ − log ρ − 1], ρ = π/μ: KL(μ_old‖π_old), ours (sign-free).
    "rollout_correction/k3_kl": "mismatch/kl_k3",
    # chi2_token = E[ρ²] − 1: ours.
    "rollout_correction/chi2_token": "mismatch/chi2_token",
    # Not mapped: "kl" changed sign in December 2025 (modelscope/ms-swift#7145: it estimated
    # the reverse direction before), so a log's k1 cannot be read without its version;
    # "chi2_seq" is of the geometric mean of ρ over a sequence, not of the product (ours).
}

# prime-rl (PrimeIntellect-ai/prime-rl) ----------------------------------------------------
# src/prime_rl/trainer/rl/loss.py, compute_loss(): token_mismatch_kl = exp(ℓ) − ℓ − 1 with
# ℓ = trainer − inference logprobs (k3), averaged per sequence, logged as
# "mismatch_kl/mean" (older versions: "mismatch_kl"). In prime-rl's async mode the trainer
# may be ahead of the inference policy, so staleness is folded in.
_PRIME_RL = {
    "mismatch_kl": "mismatch/kl_k3",
    "mismatch_kl/mean": "mismatch/kl_k3",
    "entropy/mean": "policy/entropy",
    # Releases of 2026 (src/prime_rl/trainer/rl/train.py): the same token statistics under
    # the scope "all" (every environment; "<metric>/<env>/mean" per environment):
    # mismatch_kl = expm1(ℓ) − ℓ, k3, in loss.py's _mismatch_kl_from_log_ratio.
    "mismatch_kl/all/mean": "mismatch/kl_k3",
    "entropy/all/mean": "policy/entropy",
    # src/prime_rl/orchestrator/orchestrator.py, the orchestrator's own W&B run: per-problem
    # means of the rollouts' completion lengths and truncation flags, then their mean over
    # problems (equal group sizes: the batch means). Its completion_len/max is the largest
    # per-problem mean, not the longest completion: not mapped.
    "completion_len/mean": "response/len_mean",
    "is_truncated/mean": "response/trunc_frac",
    # "optim/grad_norm", "optim/lr" and "reward/mean" are already our names.
}

# open-instruct (allenai/open-instruct, the OLMo 3 RLVR trainer) ------------------------------
# open_instruct/grpo_fast.py: the learner's local_metrics and the data thread's batch metrics.
_OPEN_INSTRUCT = {
    # |local_logprobs − vllm_logprobs| over response tokens: token mean and max of |ℓ_t|
    # (TRL's sampling_logp_difference).
    "debug/vllm_vs_local_logprob_diff_mean": "mismatch/logprob_abs_diff",
    "debug/vllm_vs_local_logprob_diff_max": "mismatch/logprob_abs_diff_max",
    # mean(vllm_lp − local_lp) = k1 of KL(μ_old‖π_old). Older versions weighted each token by
    # μ (exp(vllm_lp)·(vllm_lp − local_lp)): not an unbiased KL estimate, but the same
    # quantity's direction and order of magnitude, which is what a change rule reads.
    "debug/vllm_local_reverse_kl": "mismatch/kl_k1",
    # verifiable_correct_rate: share of the batch's responses the verifier marked correct.
    "objective/verifiable_correct_rate": "reward/acc",
    "objective/scores": "reward/mean",
    # pg_clipfrac: share of tokens where the clipped surrogate term wins, as verl's.
    "policy/clipfrac_avg": "staleness/mask_frac",
    "policy/entropy_avg": "policy/entropy",
    "loss/policy_avg": "optim/loss",
    "lr": "optim/lr",
    # "val/" here is the training batch, not a validation set: mean response length.
    "val/sequence_lengths": "response/len_mean",
    "val/sequence_lengths_max": "response/len_max",
    # Not mapped: "objective/kl*_avg" is the KL to the reference model; "policy/approxkl_avg"
    # is k2 (½ℓ²) of the staleness, which has no rule of ours; "val/stop_rate" is
    # 1 − truncation only when every stop is an EOS.
}

# NeMo-RL (NVIDIA-NeMo/RL) --------------------------------------------------------------------
# nemo_rl/algorithms/loss_functions.py, ClippedPGLossFn: gen_kl_error = KL(P_gen‖P_train) of
# the generation vs the training log-probs, with the estimator of loss_fn
# reference_policy_kl_type (k3 by default: exp(ℓ) − ℓ − 1, ours), logged under "train/".
# Not mapped: token_mult_prob_error = mean exp(|ℓ|) (≥ 1, not one of our quantities) and
# policy_kl_error, the reverse KL.
_NEMO_RL = {
    "gen_kl_error": "mismatch/kl_k3",
    "train/gen_kl_error": "mismatch/kl_k3",
}

# OpenRLHF (OpenRLHF/OpenRLHF) --------------------------------------------------------------
# openrlhf/trainer/ray/ppo_actor.py, training_step(): the status dict, and
# openrlhf/models/loss.py, PolicyLoss; the trainer logs every key with the "train/" prefix
# at "train/global_step" (W&B and TensorBoard).
_OPENRLHF = {
    # vllm_kl = mean(rollout_lp − old_lp), logged when enable_vllm_is_correction is on: k1 of
    # KL(μ_old‖π_old), as verl's rollout_corr/kl.
    "train/vllm_kl": "mismatch/kl_k1",
    # ppo_clip_ratio: share of tokens where the clipped surrogate wins (surr2 < surr1), our
    # M_t = 0 share; ppo_kl = mean(old − new log-probs), k1 of the staleness.
    "train/ppo_clip_ratio": "staleness/mask_frac",
    "train/ppo_kl": "staleness/kl_k1",
    # entropy_loss: the token mean of π's entropy (logged when entropy_loss_coef is set).
    "train/entropy_loss": "policy/entropy",
    "train/policy_loss": "optim/loss",
    "train/actor_lr": "optim/lr",
    # reward: the reward function's (or model's) score before KL shaping ("return" is after).
    "train/reward": "reward/mean",
    "train/response_length": "response/len_mean",
    # Not mapped: "kl" is the KL to the reference model.
}

# Held-out scores, named per dataset, so matched by pattern. The first of several datasets
# in a logged row becomes eval/acc (the others keep their names; see import's `rename`).
_HELD_OUT = (
    # verl/trainer/ppo/ray_trainer.py, _validate(): "val-core/{data_source}/{var}/{metric}",
    # var "acc" when the reward function returns one, else "reward"; mean@N is the mean
    # score of N samples per prompt (best@N and maj@N beside it are not accuracies).
    re.compile(r"val-core/[^@]+/(acc|reward)/mean@\d+"),
    # the same function in verl's releases before 0.3: "val/test_score/{data_source}".
    re.compile(r"val/test_score/.+"),
    # trl/trainer/grpo_trainer.py, log(): evaluation metrics get the "eval_" prefix;
    # Hugging Face's W&B and TensorBoard callbacks rewrite it to "eval/".
    re.compile(r"eval[_/]reward"),
    # openrlhf/trainer/ppo_trainer.py, evaluate(): "eval/eval_{datasource}_pass1" is the mean
    # reward of every sample (pass{N} beside it is best-of-N, not an accuracy).
    re.compile(r"eval/eval_.+_pass1"),
    # nemo_rl/algorithms/grpo.py, validate(): the mean reward of the validation samples,
    # logged with the "validation/" prefix.
    re.compile(r"validation/accuracy"),
)

_PEERS = (
    _VERL,
    _TRL,
    _SLIME,
    _SLIME_MIS,
    _MS_SWIFT,
    _PRIME_RL,
    _OPEN_INSTRUCT,
    _NEMO_RL,
    _OPENRLHF,
)
PEER_NAMES: dict[str, str] = {name: ours for peer in _PEERS for name, ours in peer.items()}

# Hugging Face's Trainer (which TRL and ms-swift use) prefixes every logged key with "train/"
# in W&B and TensorBoard (transformers/integrations/integration_utils.py, rewrite_logs()).
_HF_PREFIX = "train/"
_HF_TRAINERS = {**_TRL, **_MS_SWIFT}


@functools.cache
def canonical_name(name: str) -> str:
    """Our name for a peer's metric name, or the name unchanged if it is not a known peer's."""
    if name in PEER_NAMES:
        return PEER_NAMES[name]
    if name.startswith(_HF_PREFIX) and name[len(_HF_PREFIX) :] in _HF_TRAINERS:
        return _HF_TRAINERS[name[len(_HF_PREFIX) :]]
    if any(pattern.fullmatch(name) for pattern in _HELD_OUT):
        return "eval/acc"
    return name


def rename(
    row: dict[str, float],
    renamed: dict[str, str],
    names: Mapping[str, str] | None = None,
    peers: bool = True,
) -> dict[str, float]:
    """Peer names -> ours. `names` (a user's `--map`) comes first, then the peers' names
    above unless `peers` is off. If two names land on one of ours, the first wins and the
    other keeps its own name (nothing is dropped). `renamed` collects what was mapped."""
    if not names and not peers:
        return row
    names = names or {}
    out: dict[str, float] = {}
    for name, value in row.items():
        target = names.get(name) or (canonical_name(name) if peers else name)
        if target != name and (target in out or target in row):
            target = name
        if target != name:
            renamed[name] = target
        out[target] = value
    return out


def add_map_option(parser: argparse.ArgumentParser) -> None:
    """The `--map THEIRS=OURS` option (repeatable) of `minirl import` and `minirl watch`:
    the list it collects is for `parse_name_map`."""
    parser.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="THEIRS=OURS",
        help="also map this metric name onto ours (repeatable; before the peers' names, "
        "and kept with --keep-names), e.g. token_entropy=policy/entropy for a plain script",
    )


def parse_name_map(pairs: list[str]) -> dict[str, str]:
    """`--map THEIRS=OURS` arguments -> {theirs: ours}; a malformed one is a UserError."""
    names: dict[str, str] = {}
    for pair in pairs:
        theirs, sep, ours = (part.strip() for part in pair.partition("="))
        if not (sep and theirs and ours):
            raise UserError(
                f"--map {pair!r}: expected THEIRS=OURS, e.g. token_entropy=policy/entropy"
            )
        if theirs in names and names[theirs] != ours:
            raise UserError(f"--map maps {theirs!r} twice ({names[theirs]!r} and {ours!r})")
        names[theirs] = ours
    return names
