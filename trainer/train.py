"""`minirl train CONFIG [--set a.b=c ...] [--run-dir DIR] [--resume] [--nproc N]`: one RL run.

Parses the command line, resolves the config and hands it to `trainer.run.train`. Every
user-caused problem (bad config, missing file, a run dir already in use) is a UserError
that the CLI prints in one line. `--nproc N` runs it data-parallel on N local processes
through torchrun (trainer/launch.py); started by torchrun (WORLD_SIZE > 1), rank 0 runs
the loop and the other ranks serve their shard of the policy (trainer/distributed.py).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from core.typed_config import add_set_option
from trainer.config import load_config
from trainer.outcome import exit_code
from trainer.run import resume_config, train


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minirl train", description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", help="YAML run config (optional with --resume)")
    add_set_option(p)
    p.add_argument("--run-dir", help="where the store, checkpoints and config go")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir (or the config's) from its last checkpoint",
    )
    p.add_argument("--prometheus-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.add_argument("--webhook", help="POST alerts as JSON to this URL")
    p.add_argument("--slack", action="store_true", help="send the webhook in Slack's format")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--fail-on-collapse",
        action="store_true",
        help="exit with code 3 when held-out accuracy collapsed (the run still completes)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="processes on this machine, launched by torchrun (FSDP2 data parallel, or "
        "Megatron with engine.megatron's parallel sizes)",
    )
    return p


def main(argv: list[str]) -> int:
    from trainer import distributed

    args = _parser().parse_args(argv)
    if distributed.launched():
        from trainer.engines.distributed.rank_zero import serve

        return distributed.run_ranks(lambda: _main(args), serve)
    if args.nproc < 1:
        raise _usage(f"--nproc {args.nproc}: must be >= 1")
    if args.nproc > 1:
        from trainer.launch import launch

        return launch(["train", *argv], args.nproc)
    return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.resume and args.config is None:
        if not args.run_dir:
            raise _usage("--resume without CONFIG needs --run-dir")
        cfg = resume_config(Path(args.run_dir), args.overrides)
    elif args.config is None:
        raise _usage("CONFIG is required (or --resume --run-dir DIR)")
    else:
        cfg = load_config(args.config, args.overrides)
    if args.run_dir:
        cfg = dataclasses.replace(cfg, run_dir=args.run_dir)
    notifier = None
    if args.webhook:
        from monitor.alerting.webhook import WebhookNotifier

        fmt = "slack" if args.slack else "json"
        notifier = WebhookNotifier(args.webhook, run=cfg.name, format=fmt)
    result = train(
        cfg,
        resume=args.resume,
        progress=not args.quiet,
        notifier=notifier,
        prometheus_port=args.prometheus_port,
    )
    first = f"{result.first_eval:.3f}" if result.first_eval is not None else "-"
    last = f"{result.last_eval:.3f}" if result.last_eval is not None else "-"
    print(
        f"run {result.run_dir}: {result.stopped} at step {result.last_step}; "
        f"held-out accuracy {first} -> {last}"
    )
    for line in (result.collapsed, result.note):
        if line:
            print(f"run {result.run_dir}: {line}")
    return exit_code(result.stopped, result.collapsed, args.fail_on_collapse)


def _usage(message: str) -> Exception:
    from core.errors import UserError

    return UserError(message)
