"""Advice for a verl run at a breakdown: the last healthy checkpoint and the resume command.

verl cannot be steered from its tracking backend or from a watcher (docs/attach-verl.md
says what verl 0.9.1 allows), so at a collapse the monitor says what to do instead:
which of verl's `global_step_N` checkpoint folders is the last healthy one, and verl's
own Hydra overrides for the fix the remediation policy recommends, as one command line.
It is printed, logged and stored as an action of kind `advice` (applied at once: it
changes nothing), so the Alerts page and `minirl analyze` show it like any action.

"Healthy" is measured (monitor/remediation/healthy.py): the held-out score verl logs
(`val-core/...`, our `eval/acc`), else the reward mean, within noise of the run's best
so far, and no warning or critical alert open when the checkpoint was taken (opened a
few steps early for a symptom, as `Monitor.episode_start` does).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.controls import RunControls
from core.vocabulary import TIS_CAP
from monitor.config import MonitorConfig
from monitor.integrations import settings_of
from monitor.remediation.healthy import Verdict, last_healthy
from monitor.remediation.policy import RemediationPolicy
from monitor.store.records import Action, ActionDraft, Alert

CHECKPOINT = re.compile(r"global_step_(\d+)")
"""verl's checkpoint folders under `trainer.default_local_dir`."""
ACTOR = "actor_rollout_ref.actor"
CORRECTION = "algorithm.rollout_correction"
DUAL_CLIP_C = 3.0
"""verl's default `clip_ratio_c` (dual-clip on negative advantages), restated with clipping."""
COMMAND = "python3 -m verl.trainer.main_ppo"


def checkpoint_steps(ckpt_dir: str | Path | None) -> list[int]:
    """The steps of the `global_step_N` folders in `ckpt_dir` (none if it is absent)."""
    if ckpt_dir is None or not Path(ckpt_dir).is_dir():
        return []
    found = (CHECKPOINT.fullmatch(p.name) for p in Path(ckpt_dir).iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def _get(config: Mapping[str, Any] | None, dotted: str) -> Any:
    node: Any = config or {}
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _epochs(config: Mapping[str, Any] | None) -> int:
    """verl's PPO epochs over each rollout (1 when the config does not say)."""
    epochs = _get(config, f"{ACTOR}.ppo_epochs")
    return epochs if isinstance(epochs, int) and epochs > 0 else 1


def controls_from_config(config: Mapping[str, Any] | None) -> RunControls:
    """The knobs the remediation policy reasons on, read from verl's resolved config (the
    dict verl passes to `Tracking`); a knob the config does not give is left out."""
    out: dict[str, Any] = {"variant": "ppo", "clip": True}  # verl's actor always clips
    low, high = _get(config, f"{ACTOR}.clip_ratio_low"), _get(config, f"{ACTOR}.clip_ratio_high")
    if isinstance(low, int | float) and isinstance(high, int | float):
        out["eps_low"], out["eps_high"] = float(low), float(high)
    lr = _get(config, f"{ACTOR}.optim.lr")
    if isinstance(lr, int | float):
        out["lr"] = float(lr)
    prompts = _get(config, "data.train_batch_size")
    mini = _get(config, f"{ACTOR}.ppo_mini_batch_size")
    if isinstance(prompts, int) and isinstance(mini, int) and mini > 0:
        out["mini_batches"] = max(1, prompts // mini) * _epochs(config)  # updates per rollout
    # seq-mean-token-mean divides each response's token sum by its length (GRPO's); the
    # other modes (token-mean, seq-mean-token-sum[-norm]) by a count the batch shares
    out["length_norm"] = _get(config, f"{ACTOR}.loss_agg_mode") == "seq-mean-token-mean"
    level = _get(config, f"{CORRECTION}.rollout_is")
    threshold = _get(config, f"{CORRECTION}.rollout_is_threshold")
    if config is not None and _get(config, "algorithm") is not None:
        out["is_policy"] = "none"
    if level in ("token", "sequence"):
        band = str(threshold).split("_") if isinstance(threshold, str) else []
        if len(band) == 2:
            out["is_policy"], out["is_band"] = "icepop", [float(b) for b in band]
        else:
            out["is_policy"] = "token_tis" if level == "token" else "seq_tis"
            if threshold is not None:
                out["is_cap"] = float(threshold)
    return RunControls.of(out)


def settings_from_config(config: Mapping[str, Any]) -> dict[str, float]:
    """The settings minirl's trainer logs with each step (`settings_of`), read off verl's
    config: what the in-process backend, `minirl watch` and `minirl import` log."""
    return settings_of(controls_from_config(config))


def checkpoint_dir(config: Mapping[str, Any] | None) -> Path | None:
    """verl's `trainer.default_local_dir`, where it saves `global_step_N` (relative to
    verl's working directory), or None when the config does not say it."""
    where = _get(config, "trainer.default_local_dir")
    return Path(where) if isinstance(where, str) and where and "${" not in where else None


@dataclass
class Overrides:
    """verl's Hydra overrides for a list of policy drafts, and what has no verl key."""

    overrides: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _num(x: float) -> str:
    return f"{x:.6g}"


def to_overrides(
    drafts: Sequence[ActionDraft], controls: RunControls, config: Mapping[str, Any] | None
) -> Overrides:
    """Each draft's fix as verl keys (the action vocabulary is monitor/remediation/actions.py)."""
    out = Overrides()
    add = out.overrides.append
    prompts = _get(config, "data.train_batch_size")
    for d in drafts:
        p = d.params
        if d.kind == "set_is_correction":
            if p["enabled"]:
                add(f"{CORRECTION}.rollout_is=token")
                add(f"{CORRECTION}.rollout_is_threshold={_num(p.get('cap', TIS_CAP))}")
            else:
                add(f"{CORRECTION}.rollout_is=null")
        elif d.kind == "set_is_policy":
            policy = p["policy"]
            if policy == "none":
                add(f"{CORRECTION}.rollout_is=null")
            elif policy in ("token_tis", "seq_tis"):
                add(f"{CORRECTION}.rollout_is={'token' if policy == 'token_tis' else 'sequence'}")
                if "cap" in p:
                    add(f"{CORRECTION}.rollout_is_threshold={_num(p['cap'])}")
            elif policy == "icepop" and "band" in p:
                lo, hi = p["band"]
                add(f"{CORRECTION}.rollout_is=token")
                # quoted: Hydra would read 0.5_5 as the number 0.55 (digit separators)
                add(f'{CORRECTION}.rollout_is_threshold="{_num(lo)}_{_num(hi)}"')
            else:
                out.notes.append(f"IS policy {policy}: no verl rollout-correction equivalent here")
        elif d.kind == "set_clip":
            if p["enabled"]:
                add(f"{ACTOR}.clip_ratio_low={_num(p.get('eps_low', 0.2))}")
                add(f"{ACTOR}.clip_ratio_high={_num(p.get('eps_high', 0.2))}")
                add(f"{ACTOR}.clip_ratio_c={_num(DUAL_CLIP_C)}")
            else:
                out.notes.append("clipping off: verl's PPO actor always clips")
        elif d.kind in ("set_lr_cap", "scale_lr"):
            lr = controls.lr
            if d.kind == "set_lr_cap":
                lr = p["lr"] if lr is None else min(float(lr), p["lr"])
            elif lr is not None:
                lr = float(lr) * p["factor"]
            if lr is None:
                out.notes.append(f"lower the learning rate ×{p['factor']:g} (its value is unknown)")
            else:
                add(f"{ACTOR}.optim.lr={_num(lr)}")
        elif d.kind in ("set_mini_batches", "set_mini_batches_cap"):
            if isinstance(prompts, int):
                if _epochs(config) > 1:  # n updates: n mini-batches, once
                    add(f"{ACTOR}.ppo_epochs=1")
                add(f"{ACTOR}.ppo_mini_batch_size={max(1, math.ceil(prompts / p['n']))}")
            else:
                out.notes.append(
                    f"{p['n']} mini-batch(es) per rollout: set {ACTOR}.ppo_mini_batch_size to "
                    f"data.train_batch_size / {p['n']}"
                )
        elif d.kind == "set_length_norm":
            mode = "seq-mean-token-mean" if p["enabled"] else "token-mean"
            add(f"{ACTOR}.loss_agg_mode={mode}")
        elif d.kind not in ("rollback", "stop"):
            out.notes.append(f"{d.kind} ({d.params}): no verl key known for it")
    return out


@dataclass
class Advice:
    """What to restart verl with: the checkpoint, the overrides, and why."""

    step: int | None
    checkpoint: str | None
    overrides: list[str]
    notes: list[str]
    verdict: Verdict | None
    reasons: list[str]

    def command(self) -> str:
        return " ".join([COMMAND, "<your usual overrides>", *map(shlex.quote, self.overrides)])

    def text(self) -> str:
        where = (
            f"last healthy checkpoint: {self.checkpoint} ({self.verdict.reason})"
            if self.checkpoint and self.verdict
            else "no healthy checkpoint to resume from: restart from the start"
        )
        lines = [f"minirl advice for verl: {where}", f"  resume with: {self.command()}"]
        lines += [f"  fix: {r}" for r in self.reasons]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def collapse(alerts: Sequence[Alert], cfg: MonitorConfig) -> list[Alert]:
    """The alerts that mean a breakdown (the policy rolls back on these)."""
    detectors = cfg.remediation.collapse_detectors
    return [a for a in alerts if a.severity == "critical" and a.detector in detectors]


def advise(
    mon: Any,
    step: int,
    alerts: Sequence[Alert],
    config: Mapping[str, Any] | None,
    ckpt_dir: str | Path | None,
) -> Action | None:
    """At a breakdown among `alerts`, print, store and return the advice for the verl run
    that `mon` (a `Monitor`) follows; None when no alert of this step is a breakdown or
    the advice is the one given last."""
    crashed = collapse(alerts, mon.cfg)
    if not crashed:
        return None
    controls = dataclasses.replace(
        controls_from_config(config), **_logged_lr(mon, config), lr_healthy=mon.healthy_lr()
    )
    policy = RemediationPolicy(mon.cfg.remediation)
    drafts = policy.decide(step, alerts, controls, [], mon.store.open_alerts())
    fix = to_overrides(drafts, controls, config)
    steps = checkpoint_steps(ckpt_dir)
    verdict = last_healthy(mon.judge_checkpoints(steps), before=step + 1)
    overrides = list(fix.overrides)
    checkpoint = None
    if verdict is not None and ckpt_dir is not None:
        checkpoint = str(Path(ckpt_dir).resolve() / f"global_step_{verdict.step}")
        overrides += [
            "trainer.resume_mode=resume_from_path",
            f"trainer.resume_from_path={checkpoint}",
        ]
    elif ckpt_dir is not None and not Path(ckpt_dir).is_dir():
        fix.notes.append(
            f"no checkpoint folder {ckpt_dir} here (a relative trainer.default_local_dir is "
            "relative to where verl was started; minirl watch --checkpoints DIR names it)"
        )
    elif not steps:
        where = f"in {ckpt_dir}" if ckpt_dir else "(checkpoint folder unknown)"
        fix.notes.append(
            f"no global_step_N checkpoint {where}; verl saves them with trainer.save_freq"
        )
    advice = Advice(
        verdict.step if verdict else None,
        checkpoint,
        overrides,
        fix.notes,
        verdict,
        [d.reason for d in drafts if d.kind != "rollback"],
    )
    params: dict[str, Any] = {"trainer": "verl", "overrides": overrides}
    if advice.step is not None and checkpoint is not None:
        params.update(step=advice.step, checkpoint=checkpoint)
    given = [a for a in mon.store.all_actions() if a.kind == "advice"]
    if given and given[-1].params == params:
        return None  # a later alert of the same breakdown: the advice stands
    reason = f"{crashed[0].detector} ({crashed[0].severity}) at step {step}: {crashed[0].message}"
    action = mon.request_action("advice", params, reason, "policy", crashed[0].id)
    detail = "advice only, nothing in the run was changed: " + advice.text().replace("\n", "; ")
    action = mon.resolve(action.id, "applied", detail[:4000])
    print(advice.text(), flush=True)
    return action


def _logged_lr(mon: Any, config: Mapping[str, Any] | None) -> dict[str, float]:
    """The lr last logged (`optim/lr`), when verl's config does not say it (a watch)."""
    if isinstance(_get(config, f"{ACTOR}.optim.lr"), int | float):
        return {}
    rows = mon.store.recent_scalars(max(0, (mon.last_step() or 0)))
    lr = rows[-1][1].get("optim/lr") if rows else None
    return {"lr": float(lr)} if lr is not None and lr == lr and lr > 0 else {}
