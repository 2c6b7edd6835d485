"""verl: a `minirl` tracking backend, so that `trainer.logger=[console,minirl]` stores every
step of a verl run through `Monitor` (store, detectors, alerts) in-process.

verl's `Tracking` (verl/utils/tracking.py) accepts only the backends of its fixed class
attribute `supported_backend`; `register()` adds "minirl" to it and wraps `__init__` and
`finish` to create and close a `MinirlLogger`. It must run in the process that builds
`Tracking`: in verl's PPO entry point that is a Ray actor (TaskRunner), so pass it as
Ray's worker setup hook:

    HOOK=+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook
    python -m verl.trainer.main_ppo ... trainer.logger='[console,minirl]' \\
      $HOOK=monitor.integrations.verl.register \\
      +ray_kwargs.ray_init.runtime_env.env_vars.MINIRL_RUN_DIR=/abs/path/runs/my-run

The run directory is $MINIRL_RUN_DIR, else runs/<project>/<experiment>. At a breakdown
the backend stores advice (verl_advice.py): the last healthy `global_step_N` checkpoint
and verl's overrides for the fix (docs/attach-verl.md). Without code in verl's process:
`trainer.logger='[console,tensorboard]'` and `minirl watch` on its TensorBoard directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from monitor.importers.names import rename
from monitor.integrations import log, numeric_logs, warn_alerts
from monitor.integrations.verl_advice import advise, checkpoint_dir, settings_from_config
from monitor.store.schema import store_path

BACKEND = "minirl"
RUN_DIR_ENV = "MINIRL_RUN_DIR"


class MinirlLogger:
    """A verl tracking backend: `log(data, step)` and `finish()`, as verl calls them."""

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        config: Any = None,
        run_dir: str | os.PathLike[str] | None = None,
        **monitor_kw: Any,
    ) -> None:
        from monitor.monitor import Monitor

        run_dir = (
            run_dir or os.environ.get(RUN_DIR_ENV) or Path("runs", project_name, experiment_name)
        )
        existing = store_path(run_dir).is_file()
        meta = {"trainer": "verl", "project": project_name, "experiment": experiment_name}
        self.mon = Monitor(
            run_dir, config={**meta, "verl": config or {}}, resume=existing, **monitor_kw
        )
        self.renamed: dict[str, str] = {}
        self._first = True
        self.config = config if isinstance(config, dict) else {}
        self.settings = settings_from_config(self.config) if self.config else {}
        """The run's fixed settings (`settings_of`), logged with each step."""
        ckpt = checkpoint_dir(self.config)
        self.checkpoints = ckpt.resolve() if ckpt is not None else None
        """verl's checkpoint folder, resolved where verl resolves it (its working directory)."""

    def log(self, data: dict[str, Any], step: int) -> None:
        row = {**self.settings, **rename(numeric_logs(data), self.renamed)}
        try:
            last = self.mon.last_step()
            if self._first and last is not None and step <= last:  # resumed from a checkpoint
                self.mon.truncate_after(step - 1)
            self._first = False
            alerts = self.mon.log(int(step), row)
            warn_alerts(alerts)
            advise(self.mon, int(step), alerts, self.config, self.checkpoints)
        except Exception as err:  # monitoring must not stop training
            log.warning("minirl monitor could not log step %s: %r", step, err)

    def finish(self) -> None:
        self.mon.close()


def register(tracking_cls: Any = None) -> None:
    """Make "minirl" a backend of verl's `Tracking` (idempotent). `tracking_cls` defaults
    to `verl.utils.tracking.Tracking`."""
    if tracking_cls is None:
        from verl.utils.tracking import Tracking as tracking_cls
    if BACKEND in tracking_cls.supported_backend:
        return
    tracking_cls.supported_backend = [*tracking_cls.supported_backend, BACKEND]
    init, finish = tracking_cls.__init__, tracking_cls.finish

    def __init__(self, project_name, experiment_name, default_backend="console", config=None):
        init(self, project_name, experiment_name, default_backend, config)
        backends = [default_backend] if isinstance(default_backend, str) else default_backend
        if BACKEND in backends:
            self.logger[BACKEND] = MinirlLogger(project_name, experiment_name, config)

    def finish_all(self, *args: Any, **kwargs: Any) -> None:
        done = getattr(self, "_finished", False)
        finish(self, *args, **kwargs)
        if not done and BACKEND in getattr(self, "logger", {}):
            self.logger[BACKEND].finish()

    tracking_cls.__init__, tracking_cls.finish = __init__, finish_all
