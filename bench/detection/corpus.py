"""The labelled runs the detection benchmark scores: lab incident runs and real public logs.

Every run is (step, {metric: value}) rows in our canonical names, plus what is known:
- `bench/data/lab/<config>/seed<k>.jsonl.gz`: runs of `configs/lab/incidents/` exported
  from their run stores (`export_lab_run`): a header line (config, seed, the scripted
  incidents, the induced cause as a factor), then one line per step.
- `bench/data/real/<id>.jsonl`: public per-step logs of other trainers, names mapped as
  `minirl import` maps them (with the run's `map` in `labels.json` where a plain script
  needs `--map`); `SOURCES.md` cites each.

Labels come from outcomes only, by one written rule: `monitor.analysis.collapse`'s
collapse onset on the first outcome metric present. A run whose reward held while its
held-out accuracy lost half its gain is `ambiguous`, counted neither way. A lab run whose
incident did not collapse it is `survived`, reported apart. The split is fixed before any
result: `TUNING_SEEDS` tune, other lab seeds report; a real run's fold is the parity of
the first byte of sha1(its source repository), so one source's runs sit on one side.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bench import REPO
from monitor.analysis.collapse import DIVERGENCE_METRICS, OUTCOME_METRICS, diverged_at, find_onset
from monitor.config import MonitorConfig
from monitor.detectors.rules import CLIP_ON, LENGTH_NORM, MINI_BATCHES
from monitor.importers import parse
from monitor.importers.names import canonical_name, rename
from monitor.store.reader import RunReader

if TYPE_CHECKING:
    from trainer.config import RunConfig

DATA = REPO / "bench" / "data"
TUNING_SEEDS = (0, 4)
"""Lab seeds whose runs chose the defaults; every other seed is in the report set."""
UNSEEN_SEEDS = tuple(range(37, 105))
"""Report seeds first run after the last change to the defaults designed on lab runs:
the only lab seeds that nothing in the current defaults, rule or threshold, could have
been fitted to (reported apart in bench/results/detection.md)."""
Stream = list[tuple[int, dict[str, float]]]
Label = Literal["collapse", "stable", "survived", "ambiguous"]

CAUSES = {  # incident kind -> the factor of the IS weight (or the optimiser) it induces
    "scale_lr": "optimisation",
    "set_mini_batches": "staleness",
    "set_clip": "staleness",
    "set_rollout_quant": "train_inference",
    "set_is_correction": "train_inference",
    "set_is_policy": "train_inference",
    "set_routing_replay": "routing",
    "set_length_norm": "approximation",
}


@dataclass
class Run:
    name: str
    group: Literal["lab", "real"]
    split: Literal["tune", "report"]
    stream: Stream
    cause: str | None = None
    """The induced factor (lab incident runs), or a cause the source states (real)."""
    incident_step: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    label: Label = "stable"
    onset: int | None = None
    outcome: str | None = None

    @property
    def steps(self) -> int:
        return len(self.stream)

    def series(self, keep: Callable[[str], bool]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """(steps, values) of every metric of the stream that `keep` accepts."""
        out: dict[str, tuple[list[int], list[float]]] = {}
        for step, values in self.stream:
            for name, value in values.items():
                if keep(name):
                    out.setdefault(name, ([], []))[0].append(step)
                    out[name][1].append(value)
        return {k: (np.asarray(s), np.asarray(v, dtype=float)) for k, (s, v) in out.items()}


# ---------------------------------------------------------------------------- labels
def label_run(run: Run) -> Run:
    """Set `label`, `onset` and `outcome` by the one rule (module docstring)."""
    series = run.series(lambda name: name in OUTCOME_METRICS)
    rules = MonitorConfig().detectors
    for name in OUTCOME_METRICS:
        if name in series and np.isfinite(series[name][1]).sum() >= 20:
            rule = rules.eval_collapse if name == "eval/acc" else rules.reward_collapse
            onset = find_onset(*series[name], name, rule)
            run.outcome, run.onset = name, (onset.step if onset else None)
            break
    if run.onset is None:
        steps = np.asarray([step for step, _ in run.stream])
        run.onset = diverged_at(steps, run.series(lambda name: name in DIVERGENCE_METRICS))
    if run.onset is not None:
        run.label = "collapse"
    else:
        run.label = "survived" if run.incident_step is not None else "stable"
    held_out = series.get("eval/acc")
    if run.label == "stable" and run.outcome != "eval/acc" and held_out is not None:
        onset = find_onset(*held_out, "eval/acc", rules.eval_collapse)
        if onset is not None:  # reward held, the held-out score lost half its gain
            run.label, run.onset, run.outcome = "ambiguous", onset.step, "eval/acc"
    return run


# ---------------------------------------------------------------------------- lab runs
def export_lab_run(run_dir: Path, out: Path, config: str, seed: int) -> None:
    """One lab run store -> a header line plus one JSON line per step, gzipped."""
    with RunReader(run_dir) as reader, reader.snapshot():
        series = reader.scalars(reader.metric_names())
        incidents = [{"step": (e.step or 0) + 1, **e.detail} for e in reader.events("incident")]
    steps: dict[int, dict[str, float]] = {}
    for name, (s, v) in series.items():
        if name.startswith("perf/"):
            continue
        for step, value in zip(s.tolist(), v.tolist(), strict=True):
            steps.setdefault(step, {})[name] = value
    header = {"config": config, "seed": seed, "incidents": incidents}
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        f.write(json.dumps(header) + "\n")
        for step in sorted(steps):
            row = {k: (v if math.isfinite(v) else str(v)) for k, v in steps[step].items()}
            f.write(json.dumps({"step": step, **row}, sort_keys=True) + "\n")


LAB_CONFIGS = REPO / "configs" / "lab" / "incidents"


def scripted_settings(
    step: int, config: RunConfig, incidents: list[dict[str, Any]]
) -> dict[str, float]:
    """The settings a lab run without actions used at `step` (the mini-batches per rollout,
    clipping on or off, length normalisation): its config's, as changed by the scripted
    incidents applied up to then. Runs recorded before the trainer logged a setting get it
    from here, the value it now logs (tests/test_bench_detection.py checks the two agree
    on a run that logs them)."""
    n, loss = config.train.mini_batches, config.loss
    for i in sorted(incidents, key=lambda i: i["step"]):
        if i["step"] > step:
            break
        if i["kind"] == "set_mini_batches":
            n = int(i["params"]["n"])
        elif i["kind"] == "set_clip":
            loss = dataclasses.replace(loss, clip=bool(i["params"]["enabled"]))
        elif i["kind"] == "set_length_norm":
            loss = dataclasses.replace(loss, length_norm=bool(i["params"]["enabled"]))
    return {
        MINI_BATCHES: float(n),
        CLIP_ON: float(loss.clipped),
        LENGTH_NORM: float(loss.length_norm),
    }


@functools.cache
def _lab_config(name: str) -> RunConfig:
    """The resolved config of `configs/lab/incidents/<name>.yaml`, or of
    `configs/lab/organic/<config>.yaml` for `organic/<config>` (a collapse from the
    configuration alone, no incident)."""
    from trainer.config import load_config  # torch: lab runs only

    folder = LAB_CONFIGS.parent if "/" in name else LAB_CONFIGS  # organic/<config>
    return load_config(folder / f"{name}.yaml")


def lab_runs(folder: Path = DATA / "lab", pattern: str = "*/seed*.jsonl.gz") -> list[Run]:
    """The exported lab runs (runs without remediation: their settings moved only by the
    scripted incidents), or those of them `pattern` matches under `folder`."""
    runs = []
    for path in sorted(folder.glob(pattern)):
        with gzip.open(path, "rt") as f:
            header = json.loads(f.readline())
            stream = [_row(json.loads(line)) for line in f]
        incidents = header["incidents"]
        config = _lab_config(header["config"])
        for step, row in stream:  # settings the run did not log yet (`scripted_settings`)
            if all(k.startswith("eval/") for k in row):  # an evaluation alone (the cold
                continue  # start's, at step 0): the trainer logs settings with RL steps only
            for name, value in scripted_settings(step, config, incidents).items():
                row.setdefault(name, value)
        first = min((i["step"] for i in incidents), default=None)
        causes = {CAUSES.get(i["kind"]) for i in incidents} - {None}
        runs.append(
            label_run(
                Run(
                    name=f"lab/{header['config']}/seed{header['seed']}",
                    group="lab",
                    split="tune" if header["seed"] in TUNING_SEEDS else "report",
                    stream=stream,
                    cause=causes.pop() if len(causes) == 1 else None,
                    incident_step=first,
                    meta=header,
                )
            )
        )
    return runs


def _row(obj: dict[str, Any]) -> tuple[int, dict[str, float]]:
    step = int(obj.pop("step"))
    return step, {k: float(v) for k, v in obj.items()}


# ---------------------------------------------------------------------------- real runs
def real_runs(folder: Path = DATA / "real") -> list[Run]:
    labels = json.loads((folder / "labels.json").read_text())
    runs = []
    for run_id, info in sorted(labels.items()):
        rows = parse(folder / f"{run_id}.jsonl", "jsonl").rows  # as `minirl import` reads it
        unmeasured = info.get("unmeasured")  # {"when_zero": m, "metrics": [...]}: see SOURCES.md
        if unmeasured:  # a script that logs 0 for what it did not measure (nothing trained)
            for row in rows.values():
                if row.get(unmeasured["when_zero"]) == 0:
                    for name in unmeasured["metrics"]:
                        row.pop(name, None)
        names = info.get("map", {})  # the `minirl import --map` a user would pass
        stream: Stream = [(step, rename(rows[step], {}, names)) for step in sorted(rows)]
        _outcome_alias(stream, info.get("outcome_metric"))
        repo = _repository(info.get("source", run_id))
        runs.append(
            label_run(
                Run(
                    name=f"real/{run_id}",
                    group="real",
                    split="tune" if hashlib.sha1(repo.encode()).digest()[0] % 2 == 0 else "report",
                    stream=stream,
                    meta={**info, "repository": repo},
                )
            )
        )
    return runs


def _outcome_alias(stream: Stream, outcome: str | None) -> None:
    """A source's outcome column under our name, when it is not mapped already (e.g. a
    custom accuracy column): the labelling rule reads OUTCOME_METRICS only."""
    if not outcome:
        return
    ours = canonical_name(outcome)
    if ours in OUTCOME_METRICS:
        return
    target = "reward/acc" if "acc" in outcome else "reward/mean"
    for _, values in stream:
        if ours in values and target not in values:
            values[target] = values[ours]


def _repository(source: str) -> str:
    """'github.com/owner/name, path' -> 'owner/name' (the unit of the split)."""
    text = source.split(",")[0].strip().strip("`")
    parts = [p for p in text.replace("https://", "").split("/") if p]
    if parts and parts[0] == "github.com":
        parts = parts[1:]
    return "/".join(parts[:2]) or source
