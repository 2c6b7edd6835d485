"""`minirl bench trl-remediation`: does the TRL callback's remediation rescue a real TRL run?

    minirl bench trl-remediation [--seeds 1 2 3] [--steps 90] [--runs runs/trl-remediation]

A real `trl.GRPOTrainer` (CPU, no vLLM) trains the cold-started tiny dense Qwen3 on the
generated addition task. Collapse is induced by the lr, warmed up linearly to `--peak-lr`
over `--ramp` of the steps. Per seed: the ramp with `remediation=False` (off), with
`remediation=True` (on), and the stable twin (the base lr). Checkpoints and held-out
evaluations every 10 steps, a final measurement with more samples at the end.
A run is labelled on the stream its final model lives on (a rollback's undone branch is
left out). Verdicts as `minirl bench remediation` gives them (bench/remediation/
verdicts.py): *rescued* and *worse*, the latter beside the do-nothing forks' share
(bench/results/remediation_noise.json). Writes bench/results/trl_remediation.md/.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import RESULTS
from bench.detection import corpus
from bench.remediation.results import read_logged
from bench.remediation.verdicts import NOISE, Arm, Pair, judge, noise_share
from core.errors import UserError
from monitor.store.reader import RunReader

ARMS = ("off", "on", "twin")


def start_checkpoint() -> tuple[Path, Any]:
    """The cold-started tiny dense model (cached) and its task."""
    from trainer.coldstart import ColdStartConfig, cold_start
    from trainer.models import ModelConfig
    from trainer.tasks import TaskConfig, make_task

    task_cfg = TaskConfig()
    start = cold_start(ModelConfig(arch="qwen3"), task_cfg, ColdStartConfig(), progress=False)
    return start.path, make_task(task_cfg)


def train_arm(
    start: Path, task: Any, seed: int, arm: str, out: Path, a: argparse.Namespace
) -> float:
    """One run into `out` (store in out/run, checkpoints in out/trainer); returns the
    final held-out reward (TRL's evaluation with `--final-prompts` prompts)."""
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback

    from monitor.integrations.trl import MinirlCallback

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(start)
    train = task.sample_train(a.steps * a.prompts, seed=seed)
    heldout = task.heldout()

    def rows(examples: list) -> Any:
        return datasets.Dataset.from_list(
            [{"prompt": e.prompt, "answer": e.answer} for e in examples]
        )

    def reward(prompts: list, completions: list, answer: list, **_: Any) -> list[float]:
        return [task.reward(c, ans) for c, ans in zip(completions, answer, strict=True)]

    ramp = arm != "twin"
    args = trl.GRPOConfig(
        output_dir=str(out / "trainer"),
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
        seed=seed,
        max_steps=a.steps,
        per_device_train_batch_size=a.prompts * a.generations,
        per_device_eval_batch_size=a.eval_prompts * a.generations,
        num_generations=a.generations,
        max_completion_length=a.max_tokens,
        use_vllm=False,
        beta=0.0,
        learning_rate=a.peak_lr if ramp else a.base_lr,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=int(a.ramp * a.steps) if ramp else 0,
        save_strategy="steps",
        save_steps=10,
        eval_strategy="steps",
        eval_steps=10,
        dataloader_num_workers=0,
    )
    callback = MinirlCallback(out / "run", remediation=arm != "off")
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=rows(train),
        eval_dataset=rows(heldout[: a.eval_prompts]),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.remove_callback(PrinterCallback)  # the logs go to the store, not the console
    trainer.train()
    trainer.eval_dataset = rows(heldout[: a.final_prompts])
    final = float(trainer.evaluate()["eval_reward"])
    (out / "final.json").write_text(json.dumps({"final_acc": final}) + "\n")
    return final


def read_arm(out: Path, name: str, final: float) -> Arm:
    """One run's outcome (the detection benchmark's collapse rule) and its actions."""
    logged = read_logged(out / "run")
    series, alerts, actions = logged.series, logged.alerts, logged.actions
    with RunReader(out / "run") as reader:
        undone = [(e.detail["to_step"], e.detail["step"]) for e in reader.events("rollback")]
    kept = [
        (step, row)
        for step, row in sorted(logged.rows.items())
        if not any(to < step <= at for to, at in undone)
    ]
    run = corpus.label_run(corpus.Run(name, "trl", "report", kept, None))
    evals = series["eval/acc"][1].tolist() if "eval/acc" in series else []
    applied = [a.resolved_step for a in actions if a.status == "applied"]
    return Arm(
        run=name,
        collapsed=run.label == "collapse",
        onset=run.onset,
        final_acc=final,
        best_acc=max(evals) if evals else None,
        last_eval=evals[-1] if evals else None,
        evals=evals,
        final_measured=True,
        first_precursor=min((al.step for al in alerts), default=None),
        first_action=min(applied, default=None),
        actions=[
            {
                "step": x.resolved_step,
                "kind": x.kind,
                "params": x.params,
                "status": x.status,
                "detail": x.detail[:200],
            }
            for x in actions
        ],
    )


def chance() -> tuple[float, int]:
    """The share of do-nothing forks that ended more than 5 points below their run."""
    lower, forks = noise_share(NOISE)
    return lower / forks, forks


def report(pairs: list[Pair], command: str, settings: dict) -> tuple[str, dict]:
    collapsing = [p for p in pairs if p.collapses_without]
    worse = sum(p.worse_with_remediation for p in pairs)
    share, n_forks = chance()
    f = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [
        "# TRL remediation: a real GRPOTrainer, remediation off and on, in pairs",
        "",
        f"`{command}`",
        "",
        "Produced by bench/trl_remediation.py (its docstring says how). Settings: "
        + ", ".join(f"{k}={v}" for k, v in settings.items())
        + ".",
        "",
        "| | measured | goal |",
        "|---|---|---|",
        f"| collapsing pairs rescued | {sum(p.rescued for p in collapsing)}/{len(collapsing)} "
        "| ≥ 2/3 |",
        f"| pairs where remediation did worse | {worse}/{len(pairs)} "
        f"| ≤ chance: {share:.0%} of {n_forks} do-nothing forks ended > 5 points lower |",
        "",
        "| seed | collapsed off / on | final acc off / on / twin | best eval off / on "
        "| first precursor → first action (on) | actions (on) | rescued | worse |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        acts = "; ".join(f"{x['step']}: {x['kind']} {x['status']}" for x in p.on.actions) or "none"
        lines.append(
            f"| {p.seed} | {'yes' if p.off.collapsed else 'no'} / "
            f"{'yes' if p.on.collapsed else 'no'} | {f(p.off.final_acc)} / {f(p.on.final_acc)} / "
            f"{f(p.twin_final)} | {f(p.off.best_acc)} / {f(p.on.best_acc)} | "
            f"{p.on.first_precursor} → {p.on.first_action} | {acts} | "
            f"{'yes' if p.rescued else 'no'} | {'yes' if p.worse_with_remediation else 'no'} |"
        )
    data = {
        "command": command,
        "settings": settings,
        "chance_worse": share,
        "pairs": [asdict(p) for p in pairs],
    }
    return "\n".join(lines) + "\n", data


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minirl bench trl-remediation", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--ramp", type=float, default=0.4, help="share of the steps the lr ramps over")
    p.add_argument("--base-lr", type=float, default=5e-5, help="the stable twin's lr")
    p.add_argument("--peak-lr", type=float, default=6e-4, help="where the ramp ends")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--generations", type=int, default=4, help="responses per prompt")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--final-prompts", type=int, default=200)
    p.add_argument("--runs", default="runs/trl-remediation")
    p.add_argument("--no-train", action="store_true", help="only judge the runs that exist")
    p.add_argument("--out", default=str(RESULTS / "trl_remediation.md"))
    return p


def main(argv: list[str]) -> int:
    a = _parser().parse_args(argv)
    if a.steps < 20 or not 0 < a.ramp <= 1:
        raise UserError("--steps must be ≥ 20 and --ramp in (0, 1]")
    os.environ.setdefault("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    start, task = (None, None) if a.no_train else start_checkpoint()
    # (a finished arm, with its final.json, is read rather than trained again)
    pairs = []
    for seed in a.seeds:
        finals, arms = {}, {}
        for arm in ARMS:
            out = Path(a.runs) / f"seed{seed}" / arm
            if a.no_train or (out / "final.json").is_file():  # a finished arm is reused
                finals[arm] = json.loads((out / "final.json").read_text())["final_acc"]
            else:
                finals[arm] = train_arm(start, task, seed, arm, out, a)
            arms[arm] = read_arm(out, f"{arm}/seed{seed}", finals[arm])
            print(
                f"seed {seed} {arm}: final {finals[arm]:.3f} collapsed {arms[arm].collapsed}",
                file=sys.stderr,
                flush=True,
            )
        pairs.append(judge(Pair("lr_ramp", seed, False, arms["off"], arms["on"], finals["twin"])))
    settings = {k: v for k, v in vars(a).items() if k not in ("out", "runs", "no_train")}
    command = "minirl bench trl-remediation " + shlex.join(argv)
    md, data = report(pairs, command.strip(), settings)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md)
    out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    print(md)
    return 0
