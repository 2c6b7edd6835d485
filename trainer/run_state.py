"""`RunState`: what the RL loop works on, shared by the loop and its step boundary.

The config, the store, both engines (through their protocols), the controls, and where
the run is: the step counter, the last logged step and the data/lr position. The loop
(trainer/run.py) and the step-boundary handlers (trainer/boundary.py) change it; it
runs nothing itself but the lr rule every change of position or controls must apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from monitor import Monitor
from trainer.config import RunConfig
from trainer.controls import Controls
from trainer.engines.base import InferenceEngine, TrainingEngine
from trainer.progress import NoProgress, Progress
from trainer.tasks import Task


@dataclass
class RunState:
    """One run in progress (see the module docstring)."""

    cfg: RunConfig
    run_dir: Path
    mon: Monitor
    policy: TrainingEngine
    task: Task
    controls: Controls
    bar: Progress | NoProgress
    step: int
    """The last step run (or being run)."""
    logged: int
    """The last step whose record is in the store."""
    pos: int
    """Position in the data and the lr schedule: the step's prompts, sampling seeds and lr
    follow it. Equal to `step` until a rollback rewinds it to its checkpoint's (the step
    counter keeps going forward, so the store keeps the rolled-back branch)."""
    engine: InferenceEngine | None = None
    """Made inside the crash guard, so that a failing start is recorded too."""
    evals: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    partial: bool = False
    """Interrupted mid-step: that step is neither logged nor checkpointed."""

    @property
    def done(self) -> int:
        """How far the run is towards `train.steps`: steps taken, or (`train.rollback_redo`)
        its data position, which a rollback moves back."""
        return self.pos if self.cfg.train.rollback_redo else self.step

    @property
    def last_step(self) -> int:
        """The step the loop ends at: later after a rollback when its steps are redone."""
        return self.step + self.cfg.train.steps - self.done

    def set_lr(self, next_step: bool = True) -> None:
        """lr = base × remediation's scale × the schedule at the data position (of the
        next step, or of the current one), never above remediation's cap (a cap holds
        whatever the schedule or a scripted ramp does)."""
        c, base = self.controls, self.cfg.optim.lr
        scale = c.lr_scale * self.cfg.train.lr_scale(self.pos - 1 if next_step else self.pos)
        if c.lr_cap is not None:
            scale = min(scale, c.lr_cap / base)
        self.policy.set_lr_scale(scale)
