"""A TRL / Hugging Face `TrainerCallback` that feeds every logged step to a `Monitor`.

    from monitor.integrations.trl import MinirlCallback
    trainer = GRPOTrainer(..., callbacks=[MinirlCallback("runs/grpo-1")])

`on_log` receives what the trainer logs at `state.global_step`; names are mapped onto
ours (importers/names.py) and stored through `Monitor` (store, detectors, alerts, the
optional webhook and Prometheus exporter). Only the main process logs; a run resumed
from a checkpoint continues its store. With `remediation=True` the callback applies the
monitor's actions (and those requested from the dashboard) at the step boundary
(trl_actions.py); it needs the trainer (`trainer=`, `attach(trainer)`, or the Trainer
that calls `on_train_begin`), single-process runs only. The default is observe-only: it
never changes or stops training, and a failure to log is a warning. Importing this module
imports nothing heavy; `MinirlCallback` is built on first access.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from core.errors import UserError
from monitor.importers.names import rename
from monitor.integrations import log, numeric_logs, settings_of, warn_alerts
from monitor.integrations.trl_actions import TrainerActions, controls_of, healthy_checkpoint
from monitor.store.schema import store_path


def _args_config(args: Any) -> dict[str, Any]:
    try:
        config = args.to_dict()
    except Exception:  # not a TrainingArguments: keep what is plain
        config = {k: v for k, v in vars(args).items() if isinstance(v, str | int | float)}
    return {"trainer": type(args).__name__, **config}


def _calling_trainer(callback: Any) -> Any:
    """The Trainer up the call stack whose callbacks include `callback`, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        handler = getattr(owner, "callback_handler", None)
        if handler is not None and callback in getattr(handler, "callbacks", ()):
            return owner
        frame = frame.f_back
    return None


@functools.cache
def _callback_class() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as err:
        raise UserError(f"MinirlCallback needs transformers (pip install trl): {err}") from None

    class MinirlCallback(TrainerCallback):
        """Feeds the trainer's logs to a Monitor of `run_dir` and, with `remediation`,
        applies its actions (see the module docstring); `redo=False` ends a rolled-back
        run at `max_steps` steps taken instead of training the undone steps again;
        `monitor_kw` go to `Monitor` (notifier, prometheus_port, monitor_config...)."""

        def __init__(
            self,
            run_dir: str | os.PathLike[str],
            keep_names: bool = False,
            remediation: bool = False,
            trainer: Any = None,
            redo: bool = True,
            **monitor_kw: Any,
        ) -> None:
            self.run_dir, self.keep_names, self.monitor_kw = run_dir, keep_names, monitor_kw
            self.remediation, self.trainer, self.redo = remediation, trainer, redo
            self.mon: Any = None
            self.actions: TrainerActions | None = None
            self.step = 0
            self.renamed: dict[str, str] = {}
            self.settings: dict[str, float] = {}
            """The run's fixed settings (`settings_of`), logged with each row."""

        def attach(self, trainer: Any) -> None:
            """The trainer whose run remediation acts on."""
            self.trainer = trainer

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if not state.is_world_process_zero or self.mon is not None:
                return
            from monitor.monitor import Monitor

            self.step = int(state.global_step)
            trainer = None
            if self.remediation:
                trainer = self.trainer or _calling_trainer(self)
                if trainer is None:
                    raise UserError(
                        "MinirlCallback(remediation=True) needs the trainer: pass trainer= "
                        "or call attach(trainer)"
                    )
                if getattr(args, "world_size", 1) > 1:
                    raise UserError("MinirlCallback remediation acts on single-process runs only")
            existing = store_path(self.run_dir).is_file()
            if existing and self.step == 0:
                raise UserError(
                    f"{self.run_dir} already holds a run; give the callback a new run dir "
                    "(a run resumed from a checkpoint continues its own)"
                )
            kw_mon = dict(self.monitor_kw)
            controls = controls_of(args, trainer)
            if hasattr(args, "num_generations"):  # an RL config (GRPO's, RLOO's): it has them
                self.settings = settings_of(controls)
            if self.remediation:
                kw_mon.update(remediation=True, controls=controls)
            self.mon = Monitor(self.run_dir, config=_args_config(args), resume=existing, **kw_mon)
            last = self.mon.last_step()
            if last is not None and last > self.step:
                self.mon.truncate_after(self.step)
            if self.remediation:
                self.actions = TrainerActions(trainer, self.mon, redo=self.redo)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.step = max(self.step, int(state.global_step))
            self._stop_if_asked(args, control)

        def _stop_if_asked(self, args: Any, control: Any) -> None:
            """A pending stop ends training after this step, naming the last healthy
            checkpoint (the checkpoints saved so far, judged by healthy.py)."""
            if self.actions is None:
                return
            for action in self.mon.pending_actions():
                if action.kind != "stop":
                    continue
                control.should_training_stop = True
                found = healthy_checkpoint(self.mon, args.output_dir)
                where = (
                    f"last healthy checkpoint {found[0]} ({found[1].reason})"
                    if found
                    else f"no healthy checkpoint in {args.output_dir}"
                )
                self.mon.resolve(
                    action.id, "applied", f"training stops at step {self.step}; {where}"
                )
                self.mon.event(
                    "stop",
                    {"step": self.step, "checkpoint": str(found[0]) if found else None},
                )
                log.warning("minirl: stopping at step %d; %s", self.step, where)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if self.mon is None or not logs:
                return
            row = numeric_logs(logs)
            if not self.keep_names:
                row = rename(row, self.renamed)
            if self.settings:  # an RL config's, as remediation left them (the controls follow)
                row = {**(settings_of(self.mon.controls) if self.actions else self.settings), **row}
            step = max(self.step, int(state.global_step))
            try:
                warn_alerts(self.mon.log(step, row))
            except Exception as err:  # monitoring must not stop training
                log.warning("minirl monitor could not log step %d: %r", step, err)
            self._stop_if_asked(args, control)

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.actions is not None:
                self.actions.close()
                self.actions = None
            if self.mon is not None:
                self.mon.close()
                self.mon = None

    MinirlCallback.__qualname__ = "MinirlCallback"
    return MinirlCallback


def __getattr__(name: str) -> Any:
    if name == "MinirlCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MinirlCallback"]  # noqa: F822 (built on first access, see __getattr__)
