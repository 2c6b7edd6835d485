"""`minirl train CONFIG --nproc N`: torchrun for the user, one clear error if a rank fails.

Runs torchrun (`torch.distributed.run`, here in-process) as
`torchrun --standalone --nproc-per-node N --max-restarts 0 -m app.cli train ...`, which
starts N ranks on this machine (trainer/distributed.py). torchrun's own reporting (a
table per failed rank, tracebacks) is replaced by one line: the first rank's error,
read from the files the ranks write, or the signal that killed a rank. Several machines
are launched with torchrun itself (README, "Several processes and machines").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from core.errors import UserError
from trainer.distributed import ENV_ERRORS

_QUIET = ("torch.distributed.run", "torch.distributed.elastic", "torch.distributed.launcher")


def launch(command: list[str], nproc: int) -> int:
    """Run `minirl *command` (e.g. ["train", CONFIG, ...]) on `nproc` local ranks; the
    job's exit code."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    with tempfile.TemporaryDirectory(prefix="minirl-ranks-") as errors, _quiet():
        args = get_args_parser().parse_args(
            ["--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0", "-m", "app.cli"]
        )
        args.training_script_args = list(command)  # not parsed: no option clash
        os.environ[ENV_ERRORS] = errors
        try:
            run(args)
        except SignalException as err:  # Ctrl-C or SIGTERM: passed on to the ranks
            if err.sigval in (signal.SIGINT, signal.SIGTERM):
                raise KeyboardInterrupt from None
            raise
        except ChildFailedError as err:
            cause, trace, user = root_cause(err.failures, Path(errors))
            print(trace, file=sys.stderr, end="")  # a bug's traceback (not a user error's)
            if cause is None:  # rank 0 ended the run with a non-zero code and said why
                return next(iter(err.failures.values())).exitcode or 1
            if command[:1] == ["train"] and not user:
                cause += (
                    "; the job stopped (the run's store and checkpoints are intact: "
                    "`minirl train --resume` continues from the last checkpoint)"
                )
            raise UserError(cause) from None
        finally:
            os.environ.pop(ENV_ERRORS, None)
    return 0


def root_cause(failures: dict[int, Any], errors: Path) -> tuple[str | None, str, bool]:
    """(what stopped the job, its traceback or "", whether it is a user error): a rank
    killed by a signal (other than torchrun's own SIGTERM to the survivors), else the
    earliest error a rank wrote (the others' are consequences: a peer gone), else None."""
    for rank, failure in sorted(failures.items()):
        code = int(failure.exitcode)
        if code < 0 and -code != signal.SIGTERM:
            return f"rank {rank} was killed by {signal.Signals(-code).name}", "", False
    records = []
    for path in errors.glob("rank*.json"):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    if not records:
        return None, "", False
    first = min(records, key=lambda r: r["time"])
    if first.get("user"):
        return first["message"], "", True
    return f"rank {first['rank']}: {first['message']}", first.get("trace", ""), False


@contextlib.contextmanager
def _quiet():
    """torchrun's log lines (its OMP_NUM_THREADS note, the failure report) off."""
    names = [n for n in logging.root.manager.loggerDict if n.startswith(_QUIET)]
    loggers = [logging.getLogger(name) for name in [*_QUIET, *names]]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
