"""A TRL / Hugging Face `TrainerCallback` that feeds every logged step to a `Monitor`.

    from monitor.integrations.trl import MinirlCallback
    trainer = GRPOTrainer(..., callbacks=[MinirlCallback("runs/grpo-1")])

`on_log` receives what the trainer logs (TRL's reward, KL, entropy, clip ratios, and the
importance-sampling / logprob-difference metrics it logs when generating with vLLM) at
`state.global_step`, which `on_step_end` keeps current; names are mapped onto ours
(importers/names.py) and stored through `Monitor`: store, detectors, alerts, and the
optional webhook and Prometheus exporter (`Monitor` keyword arguments). Only the main
process logs. A run resumed from a checkpoint (`resume_from_checkpoint`) continues its
store, dropping the steps after the checkpoint, which are about to be logged again.

Importing this module imports nothing heavy; `MinirlCallback` is built on first access,
importing transformers then. The callback never stops training: a failure to log is a
warning.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from core.errors import UserError
from monitor.importers.names import rename
from monitor.integrations import log, numeric_logs, warn_alerts
from monitor.store.schema import store_path


def _args_config(args: Any) -> dict[str, Any]:
    try:
        config = args.to_dict()
    except Exception:  # not a TrainingArguments: keep what is plain
        config = {k: v for k, v in vars(args).items() if isinstance(v, str | int | float)}
    return {"trainer": type(args).__name__, **config}


@functools.cache
def _callback_class() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as err:
        raise UserError(f"MinirlCallback needs transformers (pip install trl): {err}") from None

    class MinirlCallback(TrainerCallback):
        """Feeds the trainer's logs to a Monitor of `run_dir` (see the module docstring);
        `monitor_kw` go to `Monitor` (notifier, prometheus_port, monitor_config...)."""

        def __init__(
            self,
            run_dir: str | os.PathLike[str],
            keep_names: bool = False,
            **monitor_kw: Any,
        ) -> None:
            self.run_dir, self.keep_names, self.monitor_kw = run_dir, keep_names, monitor_kw
            self.mon: Any = None
            self.step = 0
            self.renamed: dict[str, str] = {}

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if not state.is_world_process_zero or self.mon is not None:
                return
            from monitor.monitor import Monitor

            self.step = int(state.global_step)
            existing = store_path(self.run_dir).is_file()
            if existing and self.step == 0:
                raise UserError(
                    f"{self.run_dir} already holds a run; give the callback a new run dir "
                    "(a run resumed from a checkpoint continues its own)"
                )
            self.mon = Monitor(
                self.run_dir, config=_args_config(args), resume=existing, **self.monitor_kw
            )
            last = self.mon.last_step()
            if last is not None and last > self.step:
                self.mon.truncate_after(self.step)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.step = max(self.step, int(state.global_step))

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if self.mon is None or not logs:
                return
            row = numeric_logs(logs)
            if not self.keep_names:
                row = rename(row, self.renamed)
            step = max(self.step, int(state.global_step))
            try:
                warn_alerts(self.mon.log(step, row))
            except Exception as err:  # monitoring must not stop training
                log.warning("minirl monitor could not log step %d: %r", step, err)

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
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
