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
    """The task of a TaskConfig (reads the dataset files of kind=jsonl)."""
    verifier = resolve_verifier(cfg.verifier)
    if cfg.kind == "jsonl":
        return JsonlTask(cfg, verifier)
    return GeneratedTask(cfg, verifier)


__all__ = ["Example", "Task", "TaskConfig", "in_heldout", "make_task"]
