"""The TRL callback on a real `trl.GRPOTrainer` (CPU, the tiny local model, 3 steps): the
run store holds TRL's metrics under our names, at TRL's step numbers. Importing the
integration module loads neither transformers nor torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from monitor.store.reader import RunReader

STEPS = 3


def test_importing_the_integration_loads_nothing_heavy():
    code = (
        "import sys, monitor.integrations.trl, monitor.integrations.verl; "
        "assert not {'torch', 'transformers', 'trl'} & set(sys.modules), 'heavy import'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_grpo_trainer_feeds_the_monitor(tmp_path, monkeypatch):
    monkeypatch.setenv("DISABLE_MLFLOW_INTEGRATION", "TRUE")  # TRL imports mlflow if present
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from monitor.integrations.trl import MinirlCallback
    from trainer.models.build import build_tiny_checkpoint
    from trainer.models.config import ModelConfig

    ckpt = build_tiny_checkpoint(ModelConfig(arch="qwen3"), tmp_path / "ckpt")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    data = datasets.Dataset.from_list([{"prompt": f"{i}+{i}="} for i in range(16)])

    def digits(prompts, completions, **_):
        return [sum(c.isdigit() for c in text) / max(len(text), 1) for text in completions]

    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
        max_steps=STEPS,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        use_vllm=False,
        beta=0.0,
        learning_rate=1e-3,
        dataloader_num_workers=0,
    )
    callback = MinirlCallback(tmp_path / "run")
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=[digits],
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    trainer.train()

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
    assert steps == [1, 2] and ratio_max.tolist() == [4.5, 4.5]
    with pytest.raises(Exception, match="already holds a run"):  # a new run, same dir
        MinirlCallback(tmp_path / "run").on_train_begin(args, TrainerState(), control)
