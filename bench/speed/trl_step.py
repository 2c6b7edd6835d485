"""TRL's GRPOTrainer on our tiny checkpoint, timed per step: the peer of `minirl bench speed`.

    PYTHONPATH=. bench/.venv-trl/bin/python -m bench.speed.trl_step SPEC.json OUT.json

Runs in TRL's own environment (`bench/.venv-trl`, see `vs_trl.py`), never imported by
our code: TRL pins its own transformers/accelerate/datasets. SPEC.json says what to match
(checkpoint, prompts and answers in step order, group size, lengths, updates per rollout,
optimiser, threads, the task config for the reward); OUT.json gets the wall and CPU time
of every optimiser step, TRL's own completion lengths and rewards, and the versions used.
The reward is our task's verifier (`trainer.tasks`, imported from the checkout on
PYTHONPATH; it needs no torch), so both trainers score the same text the same way.

It deliberately does nothing clever: TRL's documented GRPOConfig options only, TRL's own
generation (transformers `generate`, use_vllm=False), no callbacks but the timer.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def _reward_fn(task):
    """TRL reward function: our task's reward on each completion's text."""

    def exact_match(prompts, completions, answer, **_):
        return [task.reward(text, ans) for text, ans in zip(completions, answer, strict=True)]

    return exact_match


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    out_path = Path(argv[1])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub on this machine: fail fast, not slow
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from trainer.tasks import TaskConfig, make_task

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(int(spec["seed"]))
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(spec["checkpoint"], dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(spec["checkpoint"])
    task = make_task(TaskConfig(**spec["task"]))
    # one row per prompt, in step order; shuffle_dataset=False keeps that order
    data = datasets.Dataset.from_list(
        [{"prompt": p, "answer": a} for p, a in zip(spec["prompts"], spec["answers"], strict=True)]
    )
    n, updates = int(spec["n"]), int(spec["mini_batches"])
    rollout_rows = int(spec["prompts_per_step"]) * n
    optim = spec["optim"]
    with tempfile.TemporaryDirectory() as tmp:
        args = trl.GRPOConfig(
            output_dir=tmp,
            report_to="none",
            save_strategy="no",
            logging_steps=1,
            disable_tqdm=True,
            use_cpu=True,
            seed=int(spec["seed"]),
            max_steps=int(spec["steps"]) * updates,
            # one rollout of prompts_per_step * n responses, split into `updates` updates
            per_device_train_batch_size=rollout_rows // updates,
            gradient_accumulation_steps=1,
            steps_per_generation=updates,
            num_iterations=1,
            num_generations=n,
            max_completion_length=int(spec["max_new_tokens"]),
            temperature=float(spec["temperature"]),
            top_p=float(spec["top_p"]),
            top_k=int(spec["top_k"]),
            use_vllm=False,
            shuffle_dataset=False,
            # MiniRL's objective as close as TRL's options go: no KL, no std scaling, no
            # length normalisation (dr_grpo divides by a constant), asymmetric clipping
            beta=0.0,
            scale_rewards="none",
            loss_type="dr_grpo",
            epsilon=float(spec["eps_low"]),
            epsilon_high=float(spec["eps_high"]),
            router_aux_loss_coef=0.0,  # our trainer adds no load-balancing loss
            learning_rate=float(optim["lr"]),
            lr_scheduler_type="constant",
            warmup_steps=0,
            adam_beta1=float(optim["beta1"]),
            adam_beta2=float(optim["beta2"]),
            adam_epsilon=float(optim["eps"]),
            weight_decay=float(optim["weight_decay"]),
            max_grad_norm=float(optim["grad_clip"]) or 1e9,
            dataloader_num_workers=0,
        )
        marks: list[tuple[float, float]] = []
        records: list[dict] = []

        class Timer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                if not marks:
                    marks.append((time.perf_counter(), time.process_time()))

            def on_step_end(self, args, state, control, **kwargs):
                marks.append((time.perf_counter(), time.process_time()))

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "completions/mean_length" in logs:
                    records.append({k: v for k, v in logs.items() if isinstance(v, int | float)})

        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=[_reward_fn(task)],
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
            callbacks=[Timer()],
        )
        setup_s = time.perf_counter() - t0
        trainer.train()
    walls = [b[0] - a[0] for a, b in itertools.pairwise(marks)]
    cpus = [b[1] - a[1] for a, b in itertools.pairwise(marks)]
    result = {
        "step_wall_s": walls,
        "step_cpu_s": cpus,
        "completion_len": [row.get("completions/mean_length") for row in records],
        "reward": [row.get("reward") for row in records],
        "setup_s": setup_s,
        "versions": {
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "datasets": datasets.__version__,
        },
        "threads": torch.get_num_threads(),
    }
    out_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
