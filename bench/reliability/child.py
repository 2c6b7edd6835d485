"""`python -m bench.reliability.child [--slow-checkpoint S] [--rollback-at K]
[--pause-in-rollback S] MARKER -- TRAIN_ARGS`: `minirl train`, instrumented.

The windows a SIGKILL must land in are too short to hit by polling (a checkpoint write
of a tiny model takes milliseconds): this wrapper holds them open for S seconds and
appends a line to MARKER when it enters one, so the harness kills inside it. It also
requests a rollback at the step boundary before step K, as an operator would from the
dashboard (again after a resume if no rollback happened yet). Everything else is the
real `minirl train`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _mark(marker: Path, text: str) -> None:
    with marker.open("a") as f:
        f.write(text + "\n")


def _rolled_back(run_dir: Path) -> bool:
    """A rollback event since the last resume (a resume truncates what came after its
    checkpoint, so a rollback before it is undone)."""
    from monitor import RunReader

    with RunReader(run_dir) as reader:
        kinds = [e.kind for e in reader.events()]
    since = kinds[len(kinds) - kinds[::-1].index("truncate") :] if "truncate" in kinds else kinds
    return "rollback" in since


def main(argv: list[str]) -> int:
    cut = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("marker", type=Path)
    p.add_argument("--slow-checkpoint", type=float, default=0.0)
    p.add_argument("--rollback-at", type=int, default=0)
    p.add_argument("--pause-in-rollback", type=float, default=0.0)
    args = p.parse_args(argv[:cut])

    import trainer.checkpoints as checkpoints
    import trainer.run as run_module

    if args.slow_checkpoint:
        save = checkpoints.torch.save

        def slow_save(payload, path):  # the temporary file exists, not yet renamed
            save(payload, path)
            _mark(args.marker, f"checkpoint-writing {path}")
            time.sleep(args.slow_checkpoint)

        checkpoints.torch.save = slow_save
    if args.rollback_at:
        apply_actions = run_module.apply_actions

        def with_request(run):
            if run.step + 1 == args.rollback_at and not _rolled_back(run.run_dir):
                run.mon.request_action("rollback", {}, "fault injection", source="user")
            return apply_actions(run)

        run_module.apply_actions = with_request
    if args.pause_in_rollback:
        rollback = run_module.rollback

        def paused(run, request):
            _mark(args.marker, f"rollback {run.step}")
            time.sleep(args.pause_in_rollback / 2)
            rollback(run, request)  # restored, its event written, the step not yet run
            time.sleep(args.pause_in_rollback / 2)

        run_module.rollback = paused
    from core.errors import run_command
    from trainer.train import main as train

    return run_command("train", lambda: train(argv[cut + 1 :]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
