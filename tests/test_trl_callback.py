"""The TRL callback on a real `trl.GRPOTrainer` (CPU, the tiny local model, 3 steps): the
run store holds TRL's metrics under our names, at TRL's step numbers. Importing the
integration module loads neither transformers nor torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monitor.detectors.rules import CLIP_ON, LENGTH_NORM, MINI_BATCHES
from monitor.store.reader import RunReader

STEPS = 3


def test_importing_the_integration_loads_nothing_heavy():
    code = (
        "import sys, monitor.integrations.trl, monitor.integrations.verl; "
        "assert not {'torch', 'transformers', 'trl'} & set(sys.modules), 'heavy import'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    pytest.importorskip("trl")
    from trainer.models.build import build_tiny_checkpoint
    from trainer.models.config import ModelConfig

    return build_tiny_checkpoint(ModelConfig(arch="qwen3"), tmp_path_factory.mktemp("ckpt"))


def _digits(prompts, completions, **_):
    return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]


def _trainer(ckpt, out, callbacks, steps, reward=_digits, **cfg):
    """A real GRPOTrainer on the tiny local model (CPU, no vLLM), one prompt per step."""
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    data = datasets.Dataset.from_list([{"prompt": f"{i}+{i}="} for i in range(16)])
    base = dict(
        output_dir=str(out),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
        max_steps=steps,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        use_vllm=False,
        beta=0.0,
        learning_rate=1e-3,
        dataloader_num_workers=0,
    )
    args = trl.GRPOConfig(**{**base, **cfg})
    return trl.GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def test_grpo_trainer_feeds_the_monitor(tiny_ckpt, tmp_path, monkeypatch):
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")  # TRL imports mlflow if present
    from monitor.integrations.trl import MinirlCallback

    _trainer(tiny_ckpt, tmp_path / "out", [MinirlCallback(tmp_path / "run")], STEPS).train()

    with RunReader(tmp_path / "run") as reader:
        names = set(reader.metric_names())
        steps = reader.steps().tolist()
        reward = reader.scalars(["reward/mean"])["reward/mean"]
        meta = reader.meta()
        status = reader.status()
    assert steps == list(range(1, STEPS + 1))
    # TRL's names mapped onto ours: reward, entropy, loss, grad norm, lengths, clip share
    assert {
        "reward/mean",
        "policy/entropy",
        "optim/loss",
        "optim/grad_norm",
        "response/len_mean",
        "staleness/mask_frac",
    } <= names
    assert "reward" not in names and "entropy" not in names
    assert len(reward[0]) == STEPS and all(0.0 <= v <= 1.0 for v in reward[1])
    assert meta.config["trainer"] == "GRPOConfig" and meta.config["max_steps"] == STEPS
    assert status == "finished"
    # the run's settings read from its GRPOConfig (dapo loss, one update per generation)
    settings = _settings(tmp_path / "run")
    assert settings == {MINI_BATCHES: 1.0, CLIP_ON: 1.0, LENGTH_NORM: 0.0}
    with RunReader(tmp_path / "run") as reader:
        assert not [a for a in reader.alerts() if a.detector == "length_normalised"]


def _settings(run):
    with RunReader(run) as reader:
        got = reader.scalars([MINI_BATCHES, CLIP_ON, LENGTH_NORM])
    return {name: float(values[0]) for name, (_, values) in got.items() if len(values)}


def test_a_length_normalised_grpo_loss_is_warned_of_and_fixed(tiny_ckpt, tmp_path, monkeypatch):
    """loss_type="grpo" divides each completion's loss by its length: the setup rule
    `length_normalised` warns at step 1, from the settings the callback reads off the
    config (two iterations per generation: two policy updates per rollout), and
    remediation switches the trainer to "dr_grpo" before step 2, which the logged
    setting then shows."""
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    from monitor.integrations.trl import MinirlCallback

    run = tmp_path / "run"
    minirl = MinirlCallback(run, remediation=True)
    trainer = _trainer(
        tiny_ckpt, tmp_path / "out", [minirl], STEPS, loss_type="grpo", num_iterations=2
    )
    trainer.train()

    assert _settings(run) == {MINI_BATCHES: 2.0, CLIP_ON: 1.0, LENGTH_NORM: 1.0}
    with RunReader(run) as reader:
        setup = [a for a in reader.alerts() if a.detector == "length_normalised"]
        fixes = [a for a in reader.actions() if a.kind == "set_length_norm"]
        norm = reader.scalars([LENGTH_NORM])[LENGTH_NORM][1].tolist()
    assert [(a.step, a.severity) for a in setup] == [(1, "warning")]
    assert "length normalisation" in setup[0].message
    assert [(a.step, a.status, a.params) for a in fixes] == [(1, "applied", {"enabled": False})]
    assert trainer.loss_type == "dr_grpo"
    assert norm == [1.0] + [0.0] * (STEPS - 1)


def test_vllm_metrics_mapped_and_resume_from_checkpoint(tmp_path):
    """TRL's importance-sampling metrics (logged when it generates with vLLM) land under
    our mismatch names; a run resumed from a checkpoint drops the steps after it."""
    import numpy as np
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from monitor.integrations.trl import MinirlCallback

    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    logs = {
        "sampling/importance_sampling_ratio/max": torch.tensor(4.5),
        "sampling/importance_sampling_ratio/mean": np.float32(1.01),
        "sampling/sampling_logp_difference/mean": 0.02,
        "clip_ratio/region_mean": 0.1,
        "kl": 0.0,
        "note": "text",
    }
    callback, state, control = MinirlCallback(tmp_path / "run"), TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    for step in (1, 2, 3):
        state.global_step = step
        callback.on_step_end(args, state, control)
        callback.on_log(args, state, control, logs=logs)
    callback.on_train_end(args, state, control)
    resumed = MinirlCallback(tmp_path / "run")
    state.global_step = 2  # resume_from_checkpoint=checkpoint-2
    resumed.on_train_begin(args, state, control)
    resumed.on_train_end(args, state, control)
    with RunReader(tmp_path / "run") as reader:
        names = set(reader.metric_names())
        steps = reader.steps().tolist()
        ratio_max = reader.scalars(["mismatch/ratio_max"])["mismatch/ratio_max"][1]
    assert {
        "mismatch/ratio_max",
        "mismatch/ratio_mean",
        "mismatch/logprob_abs_diff",
        "staleness/mask_frac",
        "kl",
    } <= names and "note" not in names
    assert not {MINI_BATCHES, CLIP_ON, LENGTH_NORM} & names  # a plain Trainer has no such settings
    assert steps == [1, 2] and ratio_max.tolist() == [4.5, 4.5]
    with pytest.raises(Exception, match="already holds a run"):  # a new run, same dir
        MinirlCallback(tmp_path / "run").on_train_begin(args, TrainerState(), control)


# ---------------------------------------------------------------- remediation (issue 43)


def _callback_class():
    from transformers import TrainerCallback

    return TrainerCallback


class _Probe:
    """Built on first use: a callback that requests actions at given steps and records
    what each step saw (lr in the optimizer, params, optimizer state, RNG, logs)."""

    def __new__(cls, minirl=None, requests=None):
        import copy
        import random

        import numpy as np
        import torch

        base = _callback_class()

        class Probe(base):
            def __init__(self):
                self.lr, self.begin, self.params, self.logs = {}, {}, {}, {}

            def on_step_begin(self, args, state, control, model=None, optimizer=None, **kw):
                step = state.global_step + 1
                self.lr[step] = optimizer.param_groups[0]["lr"]
                self.begin[step] = {
                    "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
                    "optimizer": copy.deepcopy(optimizer.state_dict()),
                    "rng": (torch.get_rng_state(), np.random.get_state(), random.getstate()),
                }

            def on_step_end(self, args, state, control, model=None, **kw):
                step = state.global_step
                self.params[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
                for kind, params in (requests or {}).get(step, []):
                    minirl.mon.request_action(kind, params, "test", source="user")

            def on_log(self, args, state, control, logs=None, **kw):
                self.logs.setdefault(state.global_step, {}).update(logs or {})

        return Probe()


def test_remediation_lr_cap_holds_against_the_scheduler(tiny_ckpt, tmp_path, monkeypatch):
    """A cap requested after step 2 holds for every later step although the warm-up keeps
    raising the schedule; what TRL cannot change mid-run is refused with the reason."""
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    from monitor.integrations.trl import MinirlCallback

    minirl = MinirlCallback(tmp_path / "run", remediation=True)
    asks = {2: [("set_lr_cap", {"lr": 3e-4}), ("set_mini_batches", {"n": 2})]}
    asks[3] = [("set_is_correction", {"enabled": True, "cap": 2.0})]
    probe = _Probe(minirl, asks)
    trainer = _trainer(
        tiny_ckpt,
        tmp_path / "out",
        [minirl, probe],
        6,
        lr_scheduler_type="linear",
        warmup_steps=6,
    )
    trainer.train()
    # the warm-up alone: 0, 1/6, 2/6, ... of 1e-3; capped at 3e-4 from step 3 on
    want = [min(1e-3 * (s - 1) / 6, 3e-4 if s >= 3 else 1) for s in range(1, 7)]
    assert [probe.lr[s] for s in range(1, 7)] == pytest.approx(want, rel=1e-12)
    assert trainer.lr_scheduler.last_epoch == 6  # the scheduler kept stepping under the cap
    with RunReader(tmp_path / "run") as reader:
        logged = reader.scalars(["optim/lr"])["optim/lr"][1].tolist()
        actions = {a.kind: a for a in reader.actions()}
    assert logged == pytest.approx(want, rel=1e-6)  # the logged lr is the lr used
    assert actions["set_lr_cap"].status == "applied" and actions["set_lr_cap"].step is not None
    assert actions["set_mini_batches"].status == "rejected"
    assert "steps_per_generation" in actions["set_mini_batches"].detail
    assert actions["set_is_correction"].status == "rejected"
    assert "use_vllm=False" in actions["set_is_correction"].detail


def test_remediation_stop_names_the_last_healthy_checkpoint(tiny_ckpt, tmp_path, monkeypatch):
    """The reward falls after step 2: a stop asked at step 5 ends training there and
    names checkpoint-2, not the later checkpoint-4 taken after the fall."""
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    from monitor.integrations.trl import MinirlCallback

    calls = []

    def falling(prompts, completions, **_):
        calls.append(1)
        return [1.0 if len(calls) <= 2 else 0.0] * len(completions)

    minirl = MinirlCallback(tmp_path / "run", remediation=True)
    probe = _Probe(minirl, {5: [("stop", {})]})
    trainer = _trainer(
        tiny_ckpt,
        tmp_path / "out",
        [minirl, probe],
        8,
        reward=falling,
        save_strategy="steps",
        save_steps=2,
    )
    trainer.train()
    assert trainer.state.global_step == 5
    with RunReader(tmp_path / "run") as reader:
        stop = next(a for a in reader.actions() if a.kind == "stop")
        events = [e for e in reader.events() if e.kind == "stop"]
    assert stop.status == "applied"
    assert f"{tmp_path / 'out' / 'checkpoint-2'} " in stop.detail, stop.detail
    assert events and events[0].detail["checkpoint"] == str(tmp_path / "out" / "checkpoint-2")


def test_remediation_rollback_equals_a_resume_by_hand(tiny_ckpt, tmp_path, monkeypatch):
    """A rollback to checkpoint-2 asked after step 3 restores the checkpoint's weights,
    optimizer and RNG exactly, and the next steps equal a run resumed from it by hand."""
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    import numpy as np
    import torch
    from safetensors.torch import load_file

    from monitor.integrations.trl import MinirlCallback

    minirl = MinirlCallback(tmp_path / "run", remediation=True)
    rolled = _Probe(minirl, {3: [("rollback", {"step": 2})]})
    cfg = dict(save_strategy="steps", save_steps=2, lr_scheduler_type="linear")
    _trainer(tiny_ckpt, tmp_path / "a", [minirl, rolled], 6, **cfg).train()
    ckpt = tmp_path / "a" / "checkpoint-2"

    seen = rolled.begin[4]  # what step 4, the first after the rollback, started from
    saved = load_file(ckpt / "model.safetensors")
    assert saved.keys() <= seen["params"].keys()
    assert all(torch.equal(seen["params"][k], v) for k, v in saved.items())
    opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
    assert seen["optimizer"]["param_groups"] == opt["param_groups"]
    for i, state in opt["state"].items():
        assert all(torch.equal(seen["optimizer"]["state"][i][k], v) for k, v in state.items())
    rng = torch.load(ckpt / "rng_state.pth", weights_only=False)
    assert torch.equal(seen["rng"][0], rng["cpu"])
    assert np.array_equal(seen["rng"][1][1], rng["numpy"][1])  # the Mersenne state
    assert seen["rng"][2] == rng["python"]

    by_hand = _Probe()
    _trainer(tiny_ckpt, tmp_path / "b", [by_hand], 6, **cfg).train(resume_from_checkpoint=str(ckpt))
    # the rolled-back run counts steps forward, and trains the undone step again (redo)
    for a, b in ((4, 3), (5, 4), (6, 5), (7, 6)):
        _same_step(rolled, a, by_hand, b)
    with RunReader(tmp_path / "run") as reader:
        action = next(a for a in reader.actions() if a.kind == "rollback")
        event = next(e for e in reader.events() if e.kind == "rollback")
        steps = reader.steps().tolist()
    assert action.status == "applied" and "checkpoint-2" in action.detail
    assert event.detail["to_step"] == 2 and event.detail["step"] == 3
    assert event.detail["redo"] == 1 and "max_steps 7" in action.detail
    assert steps == [1, 2, 3, 4, 5, 6, 7]


def _same_step(a_probe, a, b_probe, b):
    import torch

    assert a_probe.logs[a]["loss"] == b_probe.logs[b]["loss"], (a, b)
    assert a_probe.logs[a]["grad_norm"] == b_probe.logs[b]["grad_norm"], (a, b)
    assert all(torch.equal(a_probe.params[a][k], v) for k, v in b_probe.params[b].items())


def test_rollback_redo_runs_past_the_trainers_last_epoch(tiny_ckpt, tmp_path, monkeypatch):
    """Six prompts, six steps: one epoch with no room. Rolled back from step 4 to
    checkpoint-2, the run trains data positions 3-4 again as steps 5-6; rolled back
    again from step 7 to checkpoint-6 (data position 4, saved after the first rollback),
    it trains positions 5-6 as steps 8-9, in a pass the Trainer's own loop would not
    make. Every redone step equals a resume from checkpoint-2 by hand; with redo=False
    the run ends at step 6."""
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    import datasets

    from monitor.integrations.trl import MinirlCallback

    six = datasets.Dataset.from_list([{"prompt": f"{i}+{i}="} for i in range(6)])
    cfg = dict(save_strategy="steps", save_steps=2, lr_scheduler_type="linear")
    runs = {}
    for redo in (True, False):
        minirl = MinirlCallback(tmp_path / f"run{redo}", remediation=True, redo=redo)
        asks = {4: [("rollback", {"step": 2})], 7: [("rollback", {"step": 6})]}
        probe = _Probe(minirl, asks)
        trainer = _trainer(tiny_ckpt, tmp_path / f"out{redo}", [minirl, probe], 6, **cfg)
        trainer.train_dataset = six
        trainer.train()
        runs[redo] = (trainer, probe)
    trainer, rolled = runs[True]
    assert trainer.state.global_step == 9 and sorted(rolled.logs) == list(range(1, 10))
    assert runs[False][0].state.global_step == 6

    by_hand = _Probe()
    again = _trainer(tiny_ckpt, tmp_path / "b", [by_hand], 6, **cfg)
    again.train_dataset = six
    again.train(resume_from_checkpoint=str(tmp_path / "outTrue" / "checkpoint-2"))
    for a, b in ((5, 3), (6, 4), (7, 5), (8, 5), (9, 6)):
        _same_step(rolled, a, by_hand, b)
    with RunReader(tmp_path / "runTrue") as reader:
        events = [e.detail for e in reader.events() if e.kind == "rollback"]
    assert [(e["step"], e["to_step"], e["redo"]) for e in events] == [(4, 2, 2), (7, 6, 1)]


def test_remediation_sets_what_grpo_reads_per_step(tiny_ckpt, tmp_path, monkeypatch):
    """TRL's IS correction and clipping range are the trainer's own attributes, read at
    every step: the actions set them there (use_vllm flipped on the real trainer, as if it
    generated with vLLM; the same run without vLLM refuses, see the lr-cap test)."""
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")
    from monitor.integrations.trl_actions import TrainerActions
    from monitor.monitor import Monitor

    trainer = _trainer(tiny_ckpt, tmp_path / "out", [], 1)
    trainer.use_vllm = True
    with Monitor(tmp_path / "run") as mon:
        actions = TrainerActions(trainer, mon)
        mon.request_action("set_is_policy", {"policy": "icepop", "band": [0.5, 5.0]}, "t")
        mon.request_action("set_clip", {"enabled": True, "eps_low": 0.1, "eps_high": 0.2}, "t")
        mon.request_action("set_length_norm", {"enabled": False}, "t")
        assert actions.apply_pending() is None
        done = {a.kind: a for a in mon.store.all_actions()}
        actions.close()
    assert trainer.vllm_importance_sampling_correction is True
    assert trainer.vllm_importance_sampling_mode == "token_mask"
    assert (
        trainer.vllm_importance_sampling_clip_min,
        trainer.vllm_importance_sampling_clip_max,
    ) == (0.5, 5.0)
    assert (trainer.epsilon_low, trainer.epsilon_high) == (0.1, 0.2)
    assert done["set_is_policy"].status == done["set_clip"].status == "applied"
    assert (
        done["set_length_norm"].status == "rejected"
        and "loss_type" in done["set_length_norm"].detail
    )
    assert "get_batch_samples" not in vars(trainer)  # close() unwraps the trainer
