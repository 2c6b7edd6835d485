"""`minirl watch SOURCE --out RUN_DIR`: follow another trainer's live log into a run store.

SOURCE is a TensorBoard log directory or event file, an appended JSONL file, an MLflow
store (`sqlite:///path/mlruns.db`) or a W&B run (directory or `.wandb` file). Every new
step goes through the same `Monitor` as our trainer's: store, detectors, alerts, and the
optional webhook, Prometheus exporter and dashboard. Peers' metric names are mapped onto
ours (importers/names.py). Run it again with the same SOURCE and RUN_DIR to resume: it
continues where it stopped. Ctrl-C or SIGTERM stops it after storing what was read.
It may start before SOURCE exists: it waits for it (wait.py). With `--checkpoints DIR`
(a verl run's checkpoint folder) a breakdown also prints and stores advice: the last
healthy `global_step_N` and the resume command (monitor/integrations/verl_advice.py).
With `--verl-config FILE` (the run's `.hydra/config.yaml`, its W&B `config.yaml`, or a
dump: verl_config.py) the settings read off it are logged with each step, as verl's
in-process backend logs them, and the advice is in the run's own numbers (its checkpoint
folder, `trainer.default_local_dir`, unless `--checkpoints` says otherwise).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from core.errors import UserError
from monitor.cli.import_logs import say_counts, say_renamed
from monitor.importers.names import add_map_option, parse_name_map
from monitor.integrations.verl_advice import checkpoint_dir, settings_from_config
from monitor.integrations.verl_config import add_verl_config_option, read_verl_config
from monitor.store.reader import RunReader
from monitor.store.schema import store_path
from monitor.watch.loop import SOURCE_KEY, STATE_KEY, Watcher
from monitor.watch.mlflow import PREFIX as MLFLOW_PREFIX
from monitor.watch.wait import absent, stop_on_signal, wait_for

FORMATS = ("tensorboard", "jsonl", "mlflow", "wandb", "console")
VERL_CONFIG_KEY = "verl_config"
"""Run-store meta: the verl config a watch was given (`--verl-config`), kept on resume."""


def guess_format(source: str) -> str | None:
    """The format of SOURCE from its shape, or None."""
    if source.startswith(MLFLOW_PREFIX):
        return "mlflow"
    from monitor.importers.wandb import is_wandb

    path = Path(source)
    if is_wandb(path):
        return "wandb"
    if path.is_dir() or "tfevents" in path.name:
        return "tensorboard"
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if path.suffix.lower() in (".log", ".txt", ".out", ".err"):
        return "console"  # JSON lines in it are read too
    if path.suffix.lower() == ".db":
        return "mlflow"
    if path.suffix.lower() == ".wandb":
        return "wandb"
    if not path.exists() and not path.suffix:
        return "tensorboard"  # a log directory the trainer has not created yet
    return None


def _cannot_tell(source: str) -> UserError:
    later = " (it does not exist yet)" if absent(source) else ""
    choices = "|".join(FORMATS)
    return UserError(f"cannot tell the format of {source}{later}; pass --format {choices}")


def make_source(fmt: str, where: str, run: str | None, state: dict[str, Any] | None) -> Any:
    if fmt == "mlflow":
        from monitor.watch.mlflow import MlflowSource

        return MlflowSource(where, run, state)
    from monitor.watch import sources

    cls = {
        "tensorboard": sources.TensorBoardSource,
        "jsonl": sources.JsonlSource,
        "console": sources.ConsoleSource,
        "wandb": sources.WandbSource,
    }[fmt]
    return cls(Path(where), state)


def _tensorboard_run(path: Path, run: str | None) -> Path:
    """The run directory to follow in a TensorBoard log dir: the one named by `run`, or
    the only one. Several runs in one stream would interleave their steps."""
    from monitor.importers.tensorboard import run_dirs

    if run is not None:  # followed even before its first event file appears
        return path / run
    runs = run_dirs(path) if path.is_dir() else {}
    if len(runs) > 1:
        raise UserError(
            f"{path} holds {len(runs)} TensorBoard runs ({', '.join(sorted(runs))}): "
            "watch one with --run NAME"
        )
    return path


def describe(fmt: str, source: str, run: str | None) -> dict[str, Any]:
    """What RUN_DIR is a watch of (stored as meta `source`, shown by the dashboard)."""
    where = source if fmt == "mlflow" else str(Path(source).resolve())
    return {"kind": "watch", "format": fmt, "path": where, "run": run}


def _stored_source(out: Path) -> tuple[bool, dict[str, Any] | None]:
    if not store_path(out).is_file():
        return False, None
    with RunReader(out) as reader:
        return True, reader.meta().source


def _check_out(out: Path, wanted: dict[str, Any], source: str) -> bool:
    """Whether `out` holds a watch of `wanted` to resume; an error if it holds another run."""
    existing, stored = _stored_source(out)
    if existing and (stored or {}).get("path") != wanted["path"]:
        what = f"a watch of {stored['path']}" if stored else "a run that is not a watch"
        raise UserError(f"{out} already holds {what}; choose a new --out for {source}")
    return existing


def _await_source(source: str, out: Path, fmt: str | None, run: str | None, poll: float) -> bool:
    """Wait for a source that does not exist yet (False: stopped while waiting). Its
    format must be told by --format or by the path; `out` is checked before waiting."""
    fmt = fmt or guess_format(source)
    if fmt is None:
        raise _cannot_tell(source)
    where = source
    if fmt == "mlflow" and not source.startswith(MLFLOW_PREFIX):
        where = MLFLOW_PREFIX + str(Path(source).resolve())
    if fmt == "tensorboard" and run is not None:
        where = str(Path(source) / run)
    _check_out(out, describe(fmt, where, None if fmt == "tensorboard" else run), source)
    return wait_for(source, fmt, poll)


def _notifier(url: str | None, fmt: str, run: str) -> Any:
    if not url:
        return None
    from monitor.alerting.webhook import WebhookNotifier

    try:
        return WebhookNotifier(url, run=run, format=fmt)
    except ValueError as err:
        raise UserError(str(err)) from None


def _start_dashboard(runs_dir: Path, port: int) -> subprocess.Popen:
    """`minirl dashboard` over the folder holding RUN_DIR, as a child process (the
    monitor package does not import the dashboard)."""
    exe = Path(sys.executable).with_name("minirl")
    if not exe.is_file():
        raise UserError(f"--dashboard needs the `minirl` command next to {sys.executable}")
    cmd = [str(exe), "dashboard", str(runs_dir), "--port", str(port)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL)


def _print_alert(alert: Any) -> None:
    print(
        f"step {alert.step}: {alert.severity} {alert.detector} on {alert.metric}: {alert.message}",
        flush=True,
    )


def _advising(watcher: Watcher, checkpoints: Path | None, config: dict | None) -> Any:
    """Print each alert, and at a breakdown the advice for the verl run (verl_advice.py)."""
    from monitor.integrations.verl_advice import advise

    def on_alert(alert: Any) -> None:
        _print_alert(alert)
        advise(watcher.mon, alert.step, [alert], config, checkpoints)

    return on_alert


def open_watch(
    source: str,
    out: Path,
    fmt: str | None = None,
    run: str | None = None,
    keep_names: bool = False,
    names: dict[str, str] | None = None,
    verl_config: dict[str, Any] | None = None,
    **monitor_kw: Any,
) -> Watcher:
    """A Watcher of `source` into `out`: a new run, or the continuation of the watch of
    the same source (its read state, pending values and verl config restored; a config
    given again replaces the stored one). `monitor_kw` go to `Monitor` (notifier,
    prometheus_port...); close with `watcher.mon.close()`."""
    fmt = fmt or guess_format(source)
    if fmt is None:
        raise _cannot_tell(source)
    if fmt == "mlflow" and not source.startswith(MLFLOW_PREFIX):
        source = MLFLOW_PREFIX + str(Path(source).resolve())  # a bare mlruns.db path
    if fmt not in ("mlflow", "jsonl", "console") and not Path(source).exists():
        raise UserError(f"no such file or directory: {source}")
    if fmt == "tensorboard":  # the one run followed, before any store is made
        source, run = str(_tensorboard_run(Path(source), run)), None
    wanted = describe(fmt, source, run)
    existing = _check_out(out, wanted, source)

    from monitor.monitor import Monitor

    provenance = {"watched_from": wanted["path"], "format": fmt}
    mon = Monitor(out, config=None if existing else provenance, resume=existing, **monitor_kw)
    try:
        state = mon.store.meta_json(STATE_KEY) or {}
        pending = {int(k): v for k, v in state.get("pending", {}).items()}
        src = make_source(fmt, source, run, state.get("source"))
        kept = state.get("names") or {}  # the `--map` this watch was started with
        if names and kept and names != kept:
            raise UserError(f"{out} is a watch with --map {kept}; resume it with that map or none")
        names = names or kept
        with mon.store.transaction():
            if not existing:
                mon.store.set_meta(SOURCE_KEY, wanted)
            if verl_config is not None:
                mon.store.set_meta(VERL_CONFIG_KEY, verl_config)
        config = verl_config or mon.store.meta_json(VERL_CONFIG_KEY)
        settings = settings_from_config(config) if config else {}
    except BaseException:
        mon.close()
        raise
    return Watcher(mon, src, pending, keep_names, names=names, settings=settings)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="minirl watch", description=__doc__.split("\n")[0])
    parser.add_argument("source", help="TensorBoard dir, JSONL file, sqlite:///mlruns.db, W&B run")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="run directory (resumed if it is a watch of the same SOURCE)",
    )
    parser.add_argument("--format", choices=FORMATS, help="default: from SOURCE")
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between reads (0.25)")
    parser.add_argument(
        "--run",
        help="MLflow: run id or name (default: the latest started); TensorBoard: the run "
        "directory under SOURCE, for a log dir of several runs",
    )
    parser.add_argument("--keep-names", action="store_true", help="do not map peers' names")
    add_map_option(parser)
    parser.add_argument("--once", action="store_true", help="read what is there, then exit")
    parser.add_argument("--webhook", help="POST each alert as JSON to this URL")
    parser.add_argument("--webhook-format", choices=("json", "slack"), default="json")
    parser.add_argument("--prometheus-port", type=int, help="serve /metrics on 127.0.0.1:P")
    parser.add_argument(
        "--checkpoints",
        type=Path,
        help="a verl run's trainer.default_local_dir: at a breakdown, advise the last healthy "
        "global_step_N in it and the resume command",
    )
    add_verl_config_option(parser, "and advise in its numbers at a breakdown")
    parser.add_argument("--dashboard", action="store_true", help="also serve the dashboard")
    parser.add_argument("--dashboard-port", type=int, default=8501)
    args = parser.parse_args(argv)
    if args.poll <= 0:
        raise UserError(f"--poll must be > 0 seconds, got {args.poll}")

    # a bad config file is said at once, not after a wait for the source
    config = read_verl_config(args.verl_config) if args.verl_config else None
    waiting = not args.once and absent(args.source)
    if waiting and not _await_source(args.source, args.out, args.format, args.run, args.poll):
        print(f"minirl watch: stopped before {args.source} appeared; nothing stored", flush=True)
        return 0
    notifier = _notifier(args.webhook, args.webhook_format, args.out.resolve().name)
    try:
        watcher = open_watch(
            args.source,
            args.out,
            args.format,
            args.run,
            args.keep_names,
            parse_name_map(args.map),
            config,
            prometheus_port=args.prometheus_port,
            notifier=notifier,
        )
    except BaseException:
        if notifier is not None:
            notifier.close()
        raise
    watcher.on_alert = _print_alert
    config = watcher.mon.store.meta_json(VERL_CONFIG_KEY)  # given now, or when started
    checkpoints = args.checkpoints or checkpoint_dir(config)
    if checkpoints is not None or config is not None:
        watcher.on_alert = _advising(watcher, checkpoints, config)
    mon, dashboard = watcher.mon, None
    try:
        last = mon.last_step()
        where = f" from step {last + 1}" if last is not None else ""
        print(f"minirl watch: following {args.source} into {args.out}{where}", flush=True)
        if args.dashboard:
            dashboard = _start_dashboard(args.out.resolve().parent, args.dashboard_port)
        if args.once:
            watcher.drain()
        else:
            _follow(watcher, args.poll)
    finally:
        watcher.source.close()
        mon.close()
        if dashboard is not None:
            dashboard.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                dashboard.wait(timeout=10)
    _summary(watcher, args.out)
    return 0


def _follow(watcher: Watcher, poll_s: float) -> None:
    """Run until Ctrl-C or SIGTERM (either stops the loop; what was read is stored)."""
    with stop_on_signal() as stop:
        watcher.run(stop, poll_s)


def _summary(watcher: Watcher, out: Path) -> None:
    c = watcher.counts
    print(
        f"minirl watch: stored {c.steps} steps, {c.values} values into {out}; "
        f"{c.alerts} alert(s) raised",
        flush=True,
    )
    say_renamed(c.renamed)
    say_counts(
        ("note", c.late, "value(s) of steps already stored were skipped"),
        ("warning", c.garbage, f"unreadable unit(s) skipped ({'; '.join(c.examples)})"),
    )
