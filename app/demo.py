"""`minirl demo`: the main job on this machine — a short live training run plus the dashboard.

Starts the dashboard over the runs folder (127.0.0.1), prints its URL, then trains the
demo config (tiny Qwen3-MoE, cached cold start, vLLM rollouts in bf16 against an fp32
training engine, MiniRL with automatic remediation) with a progress bar, so the run
appears and grows live in the browser. The config scripts an incident part-way (the
run made stale on purpose); it is announced before training, recorded in the store as
induced, and the monitor's alerts, the automatic actions and the rollback are printed
as they happen and summed up at the end. When training ends the dashboard keeps serving
until Ctrl-C (or exits at once with --no-wait). Without vLLM, `--engine torch` uses the
PyTorch inference engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from core.errors import UserError
from core.typed_config import add_set_option
from monitor import RunReader
from trainer.config import RunConfig, load_config

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl demo", description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(DEMO_CONFIG), help="run config (default: the demo's)")
    add_set_option(p, help="override a config key (repeatable)")
    p.add_argument("--runs-dir", default="runs", help="folder of runs the dashboard shows")
    p.add_argument("--steps", type=int, help="RL steps (default: the config's)")
    p.add_argument("--engine", choices=("vllm", "torch"), help="rollout engine (default: config)")
    p.add_argument("--host", default="127.0.0.1", help="dashboard address (default loopback)")
    p.add_argument("--port", type=int, default=8501, help="dashboard port")
    p.add_argument("--token", help="operator token (required for actions off loopback)")
    p.add_argument("--no-dashboard", action="store_true", help="train only")
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="stop the dashboard when training ends instead of serving until Ctrl-C",
    )
    return p


def announce(cfg: RunConfig) -> None:
    """Say up front what the run will be put through (nothing is hidden from the viewer)."""
    for incident in cfg.train.incidents:
        if incident.step <= cfg.train.steps:
            print(
                f"scripted: {incident.describe()} (induced on purpose; remediation is "
                f"{'on' if cfg.train.remediation else 'off'})",
                flush=True,
            )


def recap(run_dir: Path) -> None:
    """The alerts that opened an episode, every action and rollback, from the store."""
    with RunReader(run_dir) as reader:
        alerts = [a for a in reader.alerts() if a.severity != "info"]
        actions, events = reader.actions(), reader.events()
    for a in alerts[:5]:
        print(f"  alert   step {a.step}: {a.severity} {a.detector} (blamed: {a.factor})")
    if len(alerts) > 5:
        print(f"  ... and {len(alerts) - 5} more alerts (Alerts page)")
    for x in actions:
        params = ", ".join(f"{k}={v}" for k, v in x.params.items())
        print(f"  action  step {x.resolved_step}: {x.kind}({params}) {x.status} ({x.source})")
    for e in events:
        if e.kind == "rollback":
            print(
                f"  rollback at step {e.step} to the checkpoint of step {e.detail['to_step']}"
                f"; held-out accuracy there {e.detail['eval_acc_after']:.3f}"
            )


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    overrides = list(args.overrides)
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    if args.engine is not None:
        overrides.append(f"engine.inference={args.engine}")
    cfg = load_config(args.config, overrides)
    runs = Path(args.runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = runs / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))

    server = None
    if not args.no_dashboard:
        from dashboard.serve import dashboard_url, start_dashboard, wait_until_ready

        url = dashboard_url(args.host, args.port)
        server = start_dashboard(
            runs, args.host, args.port, args.token, log_file=runs / "dashboard.log"
        )
        try:
            wait_until_ready(url, server)
        except UserError:
            server.terminate()
            raise
        print(f"dashboard: {url}  (live run page: {url.rstrip('/')}/live)", flush=True)
    print(f"run directory: {run_dir}", flush=True)
    announce(cfg)

    from trainer.run import train

    try:
        result = train(cfg)
        first = "-" if result.first_eval is None else f"{result.first_eval:.3f}"
        last = "-" if result.last_eval is None else f"{result.last_eval:.3f}"
        print(
            f"demo run {result.stopped} at step {result.last_step}: held-out accuracy "
            f"{first} -> {last}; `minirl analyze {run_dir}` takes it apart."
        )
        recap(run_dir)
        if server is not None and not args.no_wait:
            print("the dashboard keeps serving; Ctrl-C to stop it", flush=True)
            server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except Exception:  # a server that ignores SIGTERM is killed
                server.kill()
    return 0
