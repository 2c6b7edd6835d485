"""Verifiable tasks: generated arithmetic/string tasks and user JSONL datasets.

task = make_task(TaskConfig(kind="add_trace", digits=3))
batch = task.sample_train(16, seed=step)          # [Example(prompt, target, answer)]
r = task.reward(response_text, batch[0].answer)   # 1.0 or 0.0
"""

from trainer.tasks.base import Example, Task, in_heldout
from trainer.tasks.config import TaskConfig
from trainer.tasks.generated import GeneratedTask
from trainer.tasks.jsonl import JsonlTask
from trainer.tasks.verifiers import resolve_verifier


def make_task(cfg: TaskConfig) -> Task:
    """The task of a TaskConfig (reads the dataset files of kind=jsonl); the tasks take
    explicit arguments and never see the config."""
    verifier = resolve_verifier(cfg.verifier)
    split = dict(seed=cfg.seed, heldout_size=cfg.heldout_size, heldout_frac=cfg.heldout_frac)
    if cfg.kind == "jsonl":
        assert cfg.train_path is not None  # TaskConfig checks it for kind=jsonl
        return JsonlTask(cfg.train_path, verifier, eval_path=cfg.eval_path, **split)
    return GeneratedTask(cfg.kind, verifier, digits=cfg.digits, **split)


__all__ = ["Example", "Task", "TaskConfig", "in_heldout", "make_task"]
