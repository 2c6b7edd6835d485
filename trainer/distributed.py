"""Data-parallel runs over torch.distributed: one process per rank, launched by torchrun.

Rank 0 runs the whole loop (trainer/run.py): the inference engine, the run store, the
remediation decisions, the RL step. The other ranks only hold their shard of the policy
(trainer/engines/distributed/fsdp.py, trainer/engines/megatron/parallel.py) and follow
rank 0 (trainer/engines/distributed/rank_zero.py): `serve` waits for the next command
that rank 0 broadcasts (`Commands.send`), then all ranks run it together (a forward on
their rows, a backward, an optimiser step, a checkpoint), so every rank applies the same
action at the same step and nothing is decided twice.
Waiting costs no CPU.

A failing rank stops the job: its one-line error goes to `$MINIRL_ERROR_DIR/rank<r>.json`
(the launcher, trainer/launch.py, reports the first one) and the process exits non-zero,
whereupon torchrun stops the others; a rank whose peer died gets an error at its next
collective, and every collective has a timeout (`MINIRL_DIST_TIMEOUT`, seconds), so no
rank waits forever. vLLM on rank 0 gets a torch.distributed world of its own (`World`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from core.errors import UserError

ENV_TIMEOUT = "MINIRL_DIST_TIMEOUT"
"""Seconds any rank waits in one collective; the workers wait in one while rank 0 does
its rollouts and evaluations alone, so it must cover the longest of those."""
DEFAULT_TIMEOUT_S = 3600.0
ENV_ERRORS = "MINIRL_ERROR_DIR"
"""Where each failing rank writes its one-line error (set by `minirl train --nproc`)."""


def launched() -> bool:
    """Started by torchrun with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    """This process is one rank of several, its process group up."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def timeout_s() -> float:
    raw = os.environ.get(ENV_TIMEOUT, str(DEFAULT_TIMEOUT_S))
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UserError(f"{ENV_TIMEOUT}={raw!r}: must be a positive number of seconds")
    return value


def init() -> None:
    """The process group of the torchrun job, with the collective timeout: gloo on the
    CPU; with CUDA, each rank on the GPU of its local rank and nccl for CUDA tensors
    (gloo still carries the commands and rows, which are CPU objects). Only the CPU
    path is tested here (no GPU on this machine)."""
    backend = "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s()))


def run_ranks(main: Callable[[], int], worker: Callable[[], None]) -> NoReturn:
    """Run `main` on rank 0 and `worker` (the loop that obeys `Commands`, e.g.
    `trainer.engines.distributed.rank_zero.serve`) on the others, then end this process
    with its exit code.

    Rank 0 tells the others to exit when `main` returns; all leave together. A failure
    on any rank is reported once (`report_failure`) and ends this process at once: its
    peers then fail at their next collective, or torchrun stops them. The process ends by
    os._exit after an orderly teardown: gloo's threads can abort the interpreter's own
    finalisation (SIGABRT, "terminate called without an active exception"), which would
    turn a finished run into a failed job.
    """
    init()
    me = dist.get_rank()
    # torchrun stops the ranks with SIGTERM (after another rank failed, when no
    # collective can complete): die at once, as torchrun expects (store and checkpoints
    # are crash-safe), not `minirl`'s SIGTERM-as-Ctrl-C; Ctrl-C reaches rank 0 as SIGINT
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        if me == 0:
            try:
                code = main()
            except UserError as err:
                report_failure(str(err), user=True)
                raise
            Commands.send("exit")
        else:
            worker()
            code = 0
    except BaseException as err:
        if not isinstance(err, UserError):
            report_failure(f"{type(err).__name__}: {err}", trace=traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)  # never wait in a teardown collective for a peer that may be gone
    dist.barrier()
    dist.destroy_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def report_failure(message: str, *, user: bool = False, trace: str = "") -> None:
    """This rank's error: into $MINIRL_ERROR_DIR for the launcher, else one line on stderr
    (after the traceback, for a bug rather than a user error)."""
    me = int(os.environ.get("RANK", "0"))
    folder = os.environ.get(ENV_ERRORS)
    if folder:  # the launcher shows the first failure's (a consequence's would mislead)
        record = {"rank": me, "time": time.time(), "message": message, "user": user}
        with contextlib.suppress(OSError), open(os.path.join(folder, f"rank{me}.json"), "w") as f:
            json.dump({**record, "trace": trace}, f)
        return
    print(f"{trace}minirl train: rank {me}: error: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- commands


class Commands:
    """Rank 0's commands to the other ranks: (name, args), broadcast as one object."""

    @staticmethod
    def send(name: str, *args: Any) -> None:
        dist.broadcast_object_list([(name, args)], src=0)

    @staticmethod
    def receive() -> tuple[str, tuple[Any, ...]]:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        return box[0]


# --------------------------------------------------------------------------- row exchange


def scatter_rows(tensors: Sequence[torch.Tensor | None] | None) -> list[torch.Tensor | None]:
    """Rank 0's [B, ...] tensors split by rows into contiguous, near-equal shares (prompt
    groups stay together when the share is a multiple of the group); each rank gets its
    own share (the others pass None)."""
    world, me = dist.get_world_size(), dist.get_rank()
    shares = None
    if me == 0:
        assert tensors is not None
        split = [t.tensor_split(world) if t is not None else [None] * world for t in tensors]
        shares = [[parts[r] for parts in split] for r in range(world)]
    out: list[Any] = [None]
    dist.scatter_object_list(out, shares, src=0)
    return out[0]


def gather_to_rank_0(obj: Any) -> list[Any] | None:
    """Every rank's `obj` (picklable), as a list by rank on rank 0 (None elsewhere)."""
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


def gather_rows(local: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None] | None:
    """Every rank's share of each tensor, concatenated by rows on rank 0 (None elsewhere)."""
    parts = gather_to_rank_0(list(local))
    if parts is None:
        return None
    return [
        torch.cat([p[i] for p in parts]) if parts[0][i] is not None else None
        for i in range(len(local))
    ]


def all_sum(values: Sequence[float]) -> list[float]:
    """Element-wise sums over all ranks, in float64."""
    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


# --------------------------------------------------------------------------- vLLM's world

_C10D_STATE = (
    "_pg_map",
    "_pg_names",
    "_pg_group_ranks",
    "_pg_backend_config",
    "_tags_to_pg",
    "_pg_to_tag",
    "_group_count",
    "_backend",
    "_default_pg_init_method",
    "_world",
)


class World:
    """A torch.distributed world of its own, for a library that initialises one.

    vLLM (on rank 0 only) starts a 1-process group as *the* default group and destroys
    it on close; in a torchrun job that would join, or tear down, the job's group. Each
    call into vLLM runs inside `active()`, which swaps torch.distributed's registry of
    groups for this one (group names offset, so none collides with the job's). Reaches
    into torch.distributed's module state: checked with torch 2.13 by the 2-process vLLM
    test (tests/test_distributed.py).
    """

    def __init__(self) -> None:
        self.state: dict[str, Any] = {
            **{name: {} for name in _C10D_STATE[:6]},
            "_group_count": 1 << 20,
            "_backend": None,
            "_default_pg_init_method": None,
            "_world": c10d._World(),
        }

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        outer = {name: getattr(c10d, name) for name in _C10D_STATE}
        for name, value in self.state.items():
            setattr(c10d, name, value)
        try:
            yield
        finally:
            self.state = {name: getattr(c10d, name) for name in _C10D_STATE}
            for name, value in outer.items():
                setattr(c10d, name, value)


class InOwnWorld:
    """An inference engine whose every call runs in a `World` of its own (vLLM on rank 0)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._world = World()
        with self._world.active():
            self._engine = make()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._engine, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._world.active():
                return value(*args, **kwargs)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:  # e.g. a scripted incident's new weight_quant
            setattr(self._engine, name, value)
