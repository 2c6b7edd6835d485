"""Held-out accuracy (`eval/acc`): the task's reward on responses to its held-out prompts.

Greedy accuracy says what the policy knows; sampled accuracy (temperature 1, what RL
optimises) says how often it shows it. Two backends: the transformers model itself,
decoded by the PyTorch engine's KV-cache loop (`engines/decode.py`; the cold start has
no inference engine yet), or
any `InferenceEngine` (sampled; greedy as temperature 0). This module holds the prompt
encoding and response decoding shared with the loop; it does not log or train.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from core.typed_config import check
from trainer.engines.base import InferenceEngine, Rollout, SamplingParams
from trainer.engines.decode import decode
from trainer.engines.device import module_device
from trainer.tasks import Example, Task


@dataclass(frozen=True)
class EvalConfig:
    """When and how the held-out set is evaluated."""

    every: int = 10
    """RL steps between evaluations (also before the first and after the last); 0: only
    before the first and after the last step."""
    mode: Literal["greedy", "sampled", "both"] = "both"
    """Which accuracies to measure. eval/acc is the sampled one when it is measured (the
    policy RL optimises), else the greedy one; both are also logged by name."""
    samples: int = 2
    """Sampled responses per held-out prompt (more: less noise, slower)."""
    temperature: float = 1.0
    """Temperature of the sampled evaluation."""
    max_new_tokens: int | None = None
    """Response cap; None takes the run's sampling.max_new_tokens."""
    batch_size: int = 256
    """Sequences decoded together by the model backend (a memory bound, not a result)."""
    seed: int = 1234
    """Seed of the sampled evaluation; the same weights give the same accuracy."""
    policy: bool = False
    """Also sample the held-out set from the training engine's own weights (π) and log
    it as eval/acc_policy. eval/acc samples the inference engine (μ); with a lossy engine
    the two differ and can rank variants differently (bench/results/stability.md)."""

    def __post_init__(self) -> None:
        check(self.every >= 0, "every", self.every, "an integer >= 0")
        check(self.samples >= 1, "samples", self.samples, "an integer >= 1")
        check(self.temperature > 0, "temperature", self.temperature, "a number > 0")
        check(
            self.max_new_tokens is None or self.max_new_tokens >= 1,
            "max_new_tokens",
            self.max_new_tokens,
            "null or an integer >= 1",
        )
        check(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")


# ---------------------------------------------------------------------------- text <-> ids


def encode_prompts(tokenizer: Any, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt, with the tokenizer's special prefix (<bos>)."""
    return [list(tokenizer(p)["input_ids"]) for p in prompts]


def decode_responses(tokenizer: Any, responses: Sequence[Sequence[int]]) -> list[str]:
    """Text of each response, cut at the first EOS (special tokens dropped)."""
    eos = tokenizer.eos_token_id
    out = []
    for ids in responses:
        ids = list(ids)
        if eos in ids:
            ids = ids[: ids.index(eos)]
        out.append(tokenizer.decode(ids, skip_special_tokens=True))
    return out


def response_texts(tokenizer: Any, rollout: Rollout) -> list[str]:
    """Text of each response of a rollout (its response_mask tokens, EOS dropped)."""
    rows = [
        ids[mask > 0].tolist()
        for ids, mask in zip(rollout.input_ids, rollout.response_mask, strict=True)
    ]
    return decode_responses(tokenizer, rows)


# ---------------------------------------------------------------------------- model backend


def generate(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    n: int,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    greedy: bool,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
) -> list[list[int]]:
    """n responses per prompt (prompt-major), each a token list ending at its EOS (kept)
    or at max_new_tokens, decoded by the inference engine's own loop (`decode`) in
    batches of `batch_size` rows on the model's device; a prompt's responses do not depend
    on its batch."""
    rows = [list(p) for p in prompts for _ in range(n)]
    params = SamplingParams(
        n=1, max_new_tokens=max_new_tokens, temperature=0.0 if greedy else temperature
    )
    gen = torch.Generator(device=module_device(model)).manual_seed(seed)
    was_training = model.training
    model.eval()
    out: list[list[int]] = []
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            out += decode(
                model, batch, params, eos_id=eos_id, pad_id=pad_id, generator=gen
            ).responses()
    finally:
        model.train(was_training)
    return out


# ---------------------------------------------------------------------------- evaluation


def _accuracy(task: Task, examples: list[Example], texts: list[str], n: int) -> float:
    rewards = [task.reward(t, examples[i // n].answer) for i, t in enumerate(texts)]
    return sum(rewards) / len(rewards)


def evaluate(
    policy: nn.Module | InferenceEngine,
    tokenizer: Any,
    task: Task,
    cfg: EvalConfig,
    *,
    max_new_tokens: int,
    seed: int | None = None,
) -> dict[str, float]:
    """{'eval/acc', 'eval/acc_greedy' and/or 'eval/acc_sampled'} on task.heldout().

    `policy` is a transformers causal LM or an InferenceEngine. `max_new_tokens` is the
    run's response cap, used unless cfg.max_new_tokens is set.
    """
    examples = task.heldout()
    prompts = encode_prompts(tokenizer, [ex.prompt for ex in examples])
    cap = cfg.max_new_tokens or max_new_tokens
    seed = cfg.seed if seed is None else seed
    runs = {"greedy": cfg.mode in ("greedy", "both"), "sampled": cfg.mode in ("sampled", "both")}
    metrics: dict[str, float] = {}
    for name, wanted in runs.items():
        if not wanted:
            continue
        n = 1 if name == "greedy" else cfg.samples
        if isinstance(policy, nn.Module):
            ids = generate(
                policy,
                prompts,
                n=n,
                max_new_tokens=cap,
                eos_id=tokenizer.eos_token_id,
                pad_id=tokenizer.pad_token_id,
                greedy=name == "greedy",
                temperature=cfg.temperature,
                seed=seed,
                batch_size=cfg.batch_size,
            )
            texts = decode_responses(tokenizer, ids)
        else:
            temperature = 0.0 if name == "greedy" else cfg.temperature
            params = SamplingParams(n=n, max_new_tokens=cap, temperature=temperature)
            texts = response_texts(tokenizer, policy.generate(prompts, params, seed))
        metrics[f"eval/acc_{name}"] = _accuracy(task, examples, texts, n)
    metrics["eval/acc"] = metrics.get("eval/acc_sampled", metrics.get("eval/acc_greedy", 0.0))
    return metrics


def policy_accuracy(
    model: nn.Module, tokenizer: Any, task: Task, cfg: EvalConfig, *, max_new_tokens: int
) -> float:
    """Sampled held-out accuracy of a transformers model itself (π, not an engine's μ),
    with the evaluation's settings."""
    sampled = dataclasses.replace(cfg, mode="sampled")
    return evaluate(model, tokenizer, task, sampled, max_new_tokens=max_new_tokens)[
        "eval/acc_sampled"
    ]
