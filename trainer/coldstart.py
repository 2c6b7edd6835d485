"""Cold start: supervised fine-tuning of a fresh tiny model on the task's targets, cached.

RL from a random model earns no reward, so every run starts from a model that already
solves some held-out prompts (the paper's RL also starts from an SFT'd model). The
checkpoint is cached under `<cache_dir>/<hash>/`, the hash covering the model, task and
cold-start configs, so later runs with the same three reuse it in a second. A plain
PyTorch loop on the transformers model: AdamW, warm-up then cosine or constant lr,
cross-entropy on target tokens only (prompt tokens are context, not labels).
It deliberately aims low (by default it stops at 30 % sampled accuracy, not 90 %): RL
needs room to improve, and the demo's time budget is on RL.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from core.errors import UserError
from core.typed_config import check, config_hash
from trainer.engines.device import module_device, resolve_device
from trainer.evaluate import EvalConfig, decode_responses, encode_prompts, evaluate, generate
from trainer.leftovers import remove_leftovers
from trainer.models import ModelConfig, build_tiny_checkpoint, load_policy
from trainer.tasks import Example, Task, TaskConfig, make_task

# Bump when the procedure changes in a way that changes the weights: old caches go stale.
COLDSTART_VERSION = 1
_TMP = re.compile(r"^\.tmp-.+-(?P<pid>\d+)$")
"""A cache entry being trained by process `pid` (renamed when complete)."""
META = "coldstart.json"


@dataclass(frozen=True)
class ColdStartConfig:
    """Supervised fine-tuning before RL, and where its checkpoint is cached."""

    enabled: bool = True
    """False: RL starts from the random-initialised model (it will earn little reward)."""
    steps: int = 500
    """Most optimiser steps; the lr schedule spans them. Training usually stops earlier,
    at stop_at_sampled_acc."""
    stop_at_sampled_acc: float | None = 0.3
    """Stop once the sampled (temperature 1) accuracy on check_prompts train-split prompts
    reaches this: RL needs room to improve, and the accuracy crosses a wide range within a
    few dozen steps, at a step that moves with seeds and thread counts, so a fixed step count
    would land anywhere in that range (`minirl bench coldstart`). null: run all steps."""
    check_every: int = 5
    """Steps between accuracy checks (each decodes check_prompts responses)."""
    check_prompts: int = 128
    """Train-split prompts of the accuracy check (binomial noise ≈ ±4 points at 30 %)."""
    batch_size: int = 64
    """(prompt, target) pairs per step, drawn from the task's train split."""
    lr: float = 3e-3
    """Peak AdamW learning rate (high: the model is tiny and starts from scratch)."""
    lr_schedule: Literal["constant", "cosine"] = "cosine"
    """After warm-up: constant, or cosine decay to min_lr_ratio * lr."""
    warmup_steps: int = 20
    """Linear warm-up steps from 0 to lr."""
    min_lr_ratio: float = 0.1
    """End of the cosine decay, as a fraction of lr."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW (β1, β2)."""
    grad_clip: float = 1.0
    """Max global gradient norm."""
    seed: int = 0
    """Seed of the data order (the initial weights follow model.seed)."""
    cache_dir: str = "~/.cache/minirl/coldstart"
    """Where checkpoints are cached, one directory per config hash. Not part of the hash."""

    def __post_init__(self) -> None:
        check(self.steps >= 0, "steps", self.steps, "an integer >= 0")
        target = self.stop_at_sampled_acc
        check(target is None or 0 < target <= 1, "stop_at_sampled_acc", target, "null or (0, 1]")
        check(self.check_every >= 1, "check_every", self.check_every, "an integer >= 1")
        check(self.check_prompts >= 1, "check_prompts", self.check_prompts, "an integer >= 1")
        check(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        check(math.isfinite(self.lr) and self.lr > 0, "lr", self.lr, "a number > 0")
        check(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, "an integer >= 0")
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", self.min_lr_ratio, "a number in [0, 1]")
        check(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        check(all(0 <= b < 1 for b in self.betas), "betas", self.betas, "two numbers in [0, 1)")
        check(self.grad_clip > 0, "grad_clip", self.grad_clip, "a number > 0")
        check(bool(self.cache_dir), "cache_dir", self.cache_dir, "a directory path")


@dataclass(frozen=True)
class ColdStart:
    """The checkpoint RL starts from and what the cold start measured."""

    path: Path
    """A checkpoint directory (weights, tokenizer, model card) every engine loads."""
    reused: bool
    """True if it came from the cache, False if it was trained now."""
    metrics: dict[str, float]
    """coldstart/{acc_greedy,acc_sampled} (held-out), coldstart/check_acc (the stopping
    check), coldstart/{loss,steps,seconds,eval_seconds}."""


def cache_key(model_cfg: ModelConfig, task_cfg: TaskConfig, cfg: ColdStartConfig) -> str:
    """Hash of everything that determines the weights (not the cache location)."""
    return config_hash(
        model_cfg, task_cfg, dataclasses.replace(cfg, cache_dir="-"), COLDSTART_VERSION
    )


def lr_at(cfg: ColdStartConfig, step: int) -> float:
    """Learning rate of optimiser step `step` (1-based): linear warm-up, then constant or
    cosine decay to min_lr_ratio * lr at the last step."""
    if step <= cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.min_lr_ratio
    return cfg.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def sft_batch(
    tokenizer: Any, examples: list[Example], device: torch.device | None = None
) -> dict[str, torch.Tensor]:
    """input_ids, attention_mask and labels [B, S] on `device`, right-padded; labels are
    -100 on the prompt and padding, so the loss covers target tokens and the closing EOS."""
    prompts = encode_prompts(tokenizer, [ex.prompt for ex in examples])
    eos = tokenizer.eos_token_id
    targets = [
        tokenizer(ex.target, add_special_tokens=False)["input_ids"] + [eos] for ex in examples
    ]
    width = max(len(p) + len(t) for p, t in zip(prompts, targets, strict=True))
    shape, kw = (len(examples), width), {"dtype": torch.long, "device": device}
    ids = torch.full(shape, tokenizer.pad_token_id, **kw)
    labels = torch.full(shape, -100, **kw)
    attn = torch.zeros(shape, **kw)
    for i, (p, t) in enumerate(zip(prompts, targets, strict=True)):
        ids[i, : len(p) + len(t)] = torch.tensor(p + t, device=device)
        labels[i, len(p) : len(p) + len(t)] = torch.tensor(t, device=device)
        attn[i, : len(p) + len(t)] = 1
    return {"input_ids": ids, "attention_mask": attn, "labels": labels}


def _check_alphabet(tokenizer: Any, task: Task) -> None:
    vocab = tokenizer.get_vocab()
    sample = task.heldout() + task.sample_train(256, seed="alphabet-check")
    missing = {ch for ex in sample for ch in ex.prompt + ex.target if ch not in vocab}
    if missing:
        raise UserError(f"task: characters {sorted(missing)} are not in the model's tokenizer")


def _progress(
    step: int, total: int, loss: float, lr: float, t0: float, check_acc: float | None
) -> None:
    elapsed = time.monotonic() - t0
    eta = elapsed / step * (total - step)
    line = f"cold start  step {step}/{total}  loss {loss:.3f}  lr {lr:.1e}"
    if check_acc is not None:
        line += f"  sampled acc {check_acc:.2f}"
    line += f"  ETA ≤{eta:4.0f}s"
    if sys.stderr.isatty():
        print("\r" + line, end="\n" if step == total else "", file=sys.stderr, flush=True)
    elif step == total or step % 50 == 0:
        print(line, file=sys.stderr, flush=True)


@dataclass
class SFTResult:
    loss: float
    """Mean loss of the last 10 % of the steps run."""
    steps: int
    """Steps actually run (fewer than cfg.steps if the accuracy target was reached)."""
    check_acc: float | None
    """Last sampled accuracy on the check prompts (None if never checked)."""


def check_accuracy(
    model: torch.nn.Module, tokenizer: Any, task: Task, examples: list[Example], seed: int
) -> float:
    """Sampled (temperature 1) accuracy on `examples`, one response each."""
    prompts = encode_prompts(tokenizer, [ex.prompt for ex in examples])
    ids = generate(
        model,
        prompts,
        n=1,
        max_new_tokens=task.max_target_chars + 1,
        eos_id=tokenizer.eos_token_id,
        pad_id=tokenizer.pad_token_id,
        greedy=False,
        seed=seed,
    )
    texts = decode_responses(tokenizer, ids)
    rewards = [task.reward(t, ex.answer) for t, ex in zip(texts, examples, strict=True)]
    return sum(rewards) / len(rewards)


def train_sft(
    model: torch.nn.Module, tokenizer: Any, task: Task, cfg: ColdStartConfig, progress: bool = True
) -> SFTResult:
    """SFT `model` in place (on its device) for cfg.steps steps, or until its sampled
    accuracy on cfg.check_prompts train-split prompts reaches cfg.stop_at_sampled_acc."""
    device = module_device(model)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
    )
    # Train-split prompts (never held-out ones), fixed for the run: the stopping rule
    # must not look at the held-out set that eval/acc reports.
    check_set = task.sample_train(cfg.check_prompts, seed=f"coldstart-check:{cfg.seed}")
    losses: list[float] = []
    check_acc: float | None = None
    t0 = time.monotonic()
    step = 0
    for step in range(1, cfg.steps + 1):
        model.train()
        lr = lr_at(cfg, step)
        for group in opt.param_groups:
            group["lr"] = lr
        examples = task.sample_train(cfg.batch_size, seed=f"coldstart:{cfg.seed}:{step}")
        loss = model(**sft_batch(tokenizer, examples, device)).loss  # token-mean CE, targets
        if not torch.isfinite(loss):
            raise RuntimeError(f"cold start: non-finite loss at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        target = cfg.stop_at_sampled_acc
        if target is not None and step % cfg.check_every == 0:
            check_acc = check_accuracy(model, tokenizer, task, check_set, seed=cfg.seed)
        if progress:
            _progress(step, cfg.steps, losses[-1], lr, t0, check_acc)
        if target is not None and check_acc is not None and check_acc >= target:
            break
    model.eval()
    tail = losses[-max(1, len(losses) // 10) :]
    return SFTResult(sum(tail) / len(tail) if tail else float("nan"), step, check_acc)


def cold_start(
    model_cfg: ModelConfig,
    task_cfg: TaskConfig,
    cfg: ColdStartConfig,
    *,
    eval_cfg: EvalConfig | None = None,
    progress: bool = True,
    device: str = "auto",
) -> ColdStart:
    """The checkpoint RL starts from: from the cache if present, else built and trained now
    on `device` (an engine.device value; the cache does not depend on it).

    A cache entry appears atomically (trained in a temporary directory, then renamed),
    so an interrupted or concurrent cold start never leaves a half-written checkpoint.
    """
    root = Path(cfg.cache_dir).expanduser()
    final = root / cache_key(model_cfg, task_cfg, cfg)
    remove_leftovers(root, _TMP)  # cold starts of killed processes
    if (final / META).is_file():
        meta = json.loads((final / META).read_text())
        return ColdStart(final, True, meta["metrics"])
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cold_start.cache_dir {root}: cannot create ({err})") from None
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        eval_cfg = eval_cfg or EvalConfig()
        metrics = _train_into(tmp, model_cfg, task_cfg, cfg, eval_cfg, progress, device)
        meta = {
            "version": COLDSTART_VERSION,
            "metrics": metrics,
            "model": dataclasses.asdict(model_cfg),
            "task": dataclasses.asdict(task_cfg),
            "cold_start": dataclasses.asdict(cfg),
        }
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        try:
            tmp.rename(final)
        except OSError:  # another process finished the same cold start first: use theirs
            if not (final / META).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ColdStart(final, False, metrics)


def _train_into(
    out: Path,
    model_cfg: ModelConfig,
    task_cfg: TaskConfig,
    cfg: ColdStartConfig,
    eval_cfg: EvalConfig,
    progress: bool,
    device: str,
) -> dict[str, float]:
    t0 = time.monotonic()
    task = make_task(task_cfg)
    build_tiny_checkpoint(model_cfg, out)  # on the CPU: the same initial weights everywhere
    model, tokenizer = load_policy(out, torch.float32, resolve_device(device))
    _check_alphabet(tokenizer, task)
    sft = SFTResult(0.0, 0, None)
    if cfg.enabled and cfg.steps > 0:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            sft = train_sft(model, tokenizer, task, cfg, progress=progress)
        model.save_pretrained(out)
    train_s = time.monotonic() - t0
    acc = evaluate(
        model,
        tokenizer,
        task,
        dataclasses.replace(eval_cfg, mode="both"),
        max_new_tokens=task.max_target_chars + 1,
    )
    trained = {} if sft.steps == 0 else {"coldstart/loss": sft.loss}
    if sft.check_acc is not None:
        trained["coldstart/check_acc"] = sft.check_acc
    return {
        "coldstart/acc_greedy": acc["eval/acc_greedy"],
        "coldstart/acc_sampled": acc["eval/acc_sampled"],
        **trained,
        "coldstart/steps": float(sft.steps),
        "coldstart/seconds": train_s,
        "coldstart/eval_seconds": time.monotonic() - t0 - train_s,
    }
