"""The run config: one YAML file, a tree of typed sections, each owned by its component.

    cfg = load_config("configs/demo.yaml", ["train.mini_batches=4", "loss.clip=false"])
    print(dump_config(cfg))   # the resolved config, as stored in the run directory

`RunConfig` composes the sections (model, engine, optim, sampling, loss, task,
cold_start, train, eval, monitor) and owns the run-level fields and the checks that
span sections. `TrainConfig` (the RL loop's own knobs) lives here too. Every default
lives in a dataclass; conversion, type checks and error messages are the generic
machinery of `core/typed_config.py`. This module does not run anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.errors import UserError
from core.typed_config import (
    check,
    from_data,
    parse_overrides,
    read_yaml_mapping,
    to_data,
    yaml_dump,
)
from minirl.advantages import Baseline
from minirl.loss import LossConfig
from minirl.routing import ReplayMode
from monitor.config import MonitorConfig
from trainer.coldstart import ColdStartConfig
from trainer.engines.base import SamplingParams
from trainer.engines.config import EngineConfig, OptimConfig
from trainer.evaluate import EvalConfig
from trainer.incidents import Incident
from trainer.models import ModelConfig
from trainer.tasks import TaskConfig
from trainer.tasks.generated import KINDS


@dataclass(frozen=True)
class TrainConfig:
    """The RL loop: how many steps, how each rollout is split into updates, the lr
    schedule, and what the loop measures and repairs."""

    steps: int = 100
    """RL steps (one rollout each)."""
    prompts_per_step: int = 16
    """Prompts per rollout; the global batch is prompts_per_step * sampling.n responses."""
    mini_batches: int = 1
    """N = global batch / mini-batch: optimiser updates per rollout. 1 is on-policy;
    2, 4, 8 are the paper's off-policy 2x/4x/8x. Splits whole prompt groups."""
    routing_replay: ReplayMode = "none"
    """MoE routing replay in the updates: R2 replays the training engine's θ_old routing
    e^π_old, R3 the inference engine's e^μ_old (paper: R2 best at 2x, R3 at 4x/8x)."""
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    """Learning-rate scale over the steps after warm-up: constant 1, or a cosine/linear
    decay to min_lr_ratio at the last step. The base lr is optim.lr."""
    warmup_steps: int = 0
    """Linear warm-up of the lr scale from 1/(warmup_steps+1) to 1."""
    min_lr_ratio: float = 0.0
    """Final lr scale of the cosine and linear schedules."""
    advantage_baseline: Baseline = "mean"
    """Â = R − mean of the group (the paper's), or − mean of the other n−1 (RLOO)."""
    advantage_std_norm: bool = False
    """Divide Â by the group's reward std (GRPO); off in MiniRL."""
    remediation: bool = False
    """Apply the monitor's remediation actions automatically. Off by default so that a
    paper ablation stays the ablation it claims to be; the demo turns it on."""
    rollback_redo: bool = True
    """Train again the steps a rollback undid, as a run resumed by hand from an earlier
    checkpoint would: the run ends when its data position (the prompts, sampling seeds and
    lr schedule) reaches `steps`, at the cost of the undone steps' compute. Off: `steps` is
    the number of steps taken (a fixed compute budget), so a run rolled back from step 67
    to 30 ends at position 63, short of its data and its schedule's end. A run that takes
    no rollback is the same either way."""
    grad_cosine_every: int = 10
    """Every this many steps, probe approx/grad_cosine (token-surrogate vs sequence-level
    IS gradient on one batch: two extra backward passes); 0 disables it."""
    diagnostics: bool = True
    """Compute the per-step diagnostics (mismatch/*, staleness/*, routing/*,
    approx/seq_residual and the per-token log-ratio distributions); off leaves only
    reward, response, loss, entropy and perf metrics."""
    incidents: tuple[Incident, ...] = ()
    """Scripted incidents (lab, demo, tests): changes induced at a known step, recorded
    as `incident` events; see trainer/incidents.py. Empty for a normal run."""
    fork_steps: int = 10
    """At an automatic rollback (remediation on), try 2-4 candidate remedies as forks of
    this many steps from the healthy checkpoint, on the same data, and continue with the
    best (trainer/forks.py); 0: roll back and apply the policy's fix untried."""
    fork_budget: float = 0.3
    """The forks' steps over the whole run, at most this share of `steps`; an experiment
    that no longer fits shortens its forks, then falls back to a plain rollback."""

    def __post_init__(self) -> None:
        check(self.steps >= 0, "steps", self.steps, "an integer >= 0")
        check(self.prompts_per_step >= 1, "prompts_per_step", self.prompts_per_step, ">= 1")
        check(
            self.mini_batches >= 1 and self.prompts_per_step % self.mini_batches == 0,
            "mini_batches",
            self.mini_batches,
            f"an integer >= 1 that divides prompts_per_step={self.prompts_per_step}",
        )
        check(self.warmup_steps >= 0, "warmup_steps", self.warmup_steps, "an integer >= 0")
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", self.min_lr_ratio, "a number in [0, 1]")
        check(self.grad_cosine_every >= 0, "grad_cosine_every", self.grad_cosine_every, ">= 0")
        check(self.fork_steps >= 0, "fork_steps", self.fork_steps, "an integer >= 0")
        check(0 <= self.fork_budget <= 10, "fork_budget", self.fork_budget, "a number in [0, 10]")

    def lr_scale(self, step: int) -> float:
        """Multiplier of optim.lr at RL step `step` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        if self.lr_schedule == "constant":
            return 1.0
        span = max(1, self.steps - 1 - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        if self.lr_schedule == "linear":
            decay = 1.0 - progress
        else:
            decay = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * decay


@dataclass(frozen=True)
class RunConfig:
    """A whole run. Each component receives its own section, never this root."""

    name: str = "minirl"
    """Run name: the default run directory and the label in the dashboard."""
    seed: int = 0
    """Seed of the RL loop: prompt order, sampling, anything not seeded by a section."""
    run_dir: str | None = None
    """Where the store, checkpoints and resolved config go; null: runs/<name>."""
    checkpoint_every: int = 50
    """RL steps between checkpoints (one is always written at the end); 0: end only."""
    keep_checkpoints: int = 3
    """Most recent checkpoints kept on disk (rollback needs at least one healthy one)."""
    threads: int | None = 1
    """torch intra-op threads of the trainer process; null: torch's default (one per core).
    1 by default: with vLLM and the dashboard beside it on 2 cores, spinning OpenMP
    threads contend for the cores and make small ops many times slower under load."""
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    loss: LossConfig = field(default_factory=LossConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)

    def __post_init__(self) -> None:
        check(
            bool(self.name) and "/" not in self.name,
            "name",
            self.name,
            "a non-empty name without '/'",
        )
        check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, ">= 0")
        check(self.keep_checkpoints >= 1, "keep_checkpoints", self.keep_checkpoints, ">= 1")
        check(self.threads is None or self.threads >= 1, "threads", self.threads, "null or >= 1")
        # SamplingParams is the engine interface's plain record: its rules are checked here.
        s = self.sampling
        check(s.n >= 2, "sampling.n", s.n, "an integer >= 2 (a group needs two responses)")
        check(s.max_new_tokens >= 1, "sampling.max_new_tokens", s.max_new_tokens, ">= 1")
        check(s.temperature > 0, "sampling.temperature", s.temperature, "a number > 0")
        check(0 < s.top_p <= 1, "sampling.top_p", s.top_p, "a number in (0, 1]")
        check(s.top_k >= 0, "sampling.top_k", s.top_k, "an integer >= 0 (0 disables)")
        if self.task.kind in KINDS:  # generated: the longest target is known, check it fits
            longest = KINDS[self.task.kind][2](self.task.digits) + 1  # + EOS
            check(
                s.max_new_tokens >= longest,
                "sampling.max_new_tokens",
                s.max_new_tokens,
                f">= {longest}, the longest {self.task.kind} target at digits="
                f"{self.task.digits} plus EOS (shorter caps truncate correct answers)",
            )
            cap = self.eval.max_new_tokens
            check(
                cap is None or cap >= longest,
                "eval.max_new_tokens",
                cap,
                f"null or >= {longest} (the longest target plus EOS)",
            )
            prompt = 2 * self.task.digits + 3  # <bos> a + b =
            check(
                self.model.max_position_embeddings >= prompt + s.max_new_tokens,
                "model.max_position_embeddings",
                self.model.max_position_embeddings,
                f">= prompt + sampling.max_new_tokens = {prompt + s.max_new_tokens}",
            )

    @property
    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir) if self.run_dir else Path("runs") / self.name


def config_from_dict(data: dict[str, Any] | None) -> RunConfig:
    """A RunConfig from plain data; UserError names the bad key, value and what is allowed."""
    return from_data(RunConfig, data)


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML run config (None: all defaults), apply `a.b=c` overrides, validate.

    A config may start from another: a top-level `base: other.yaml` (relative to the
    file) is read first and this file's sections are merged over it, key by key, so a
    paper recipe is the base setting plus the few keys it changes. Every failure a user
    can cause (missing or unparsable file, unknown key, wrong type, invalid value,
    malformed override, a cycle of bases) raises UserError with one clear line.
    """
    data: Any = {} if path is None else _read_with_bases(Path(path), ())
    return config_from_dict(parse_overrides(overrides, data))


def _read_with_bases(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """The mapping of `path`, merged over its `base:` chain."""
    data = read_yaml_mapping(path, "config")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise UserError(f"config {path}: base must be a file name, got {base!r}")
    base_path = (path.parent / base).resolve()
    if base_path in seen or base_path == path.resolve():
        raise UserError(f"config {path}: base {base} makes a cycle of bases")
    return _merge(_read_with_bases(base_path, (*seen, path.resolve())), data)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain data of a config (every field, resolved defaults included)."""
    return to_data(cfg)


def dump_config(cfg: RunConfig) -> str:
    """The resolved config as YAML; load_config of it gives back an equal RunConfig."""
    return yaml_dump(config_to_dict(cfg))
