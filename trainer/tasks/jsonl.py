"""A user's dataset: JSON lines of {"prompt": ..., "answer": ..., "target"?: ...}.

Read eagerly and checked line by line, so that a bad line stops the run before any
training with a message naming the file and line. Without an eval file, the held-out
split is made by the same prompt hash as for generated tasks. It does not tokenise.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from core.errors import UserError, read_text
from trainer.tasks.base import Example, Task, in_heldout
from trainer.tasks.verifiers import Verifier

KEYS = {"prompt", "answer", "target"}


def read_jsonl(path: str | Path) -> list[Example]:
    """Every line of a JSONL dataset as an Example; UserError names the bad line."""
    path = Path(path).expanduser()
    text = read_text(path, "task dataset")
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"task dataset {path}, line {lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{where}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected an object with prompt and answer")
        unknown = set(row) - KEYS
        if unknown:
            raise UserError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(KEYS)}")
        for key in ("prompt", "answer"):
            if key not in row:
                raise UserError(f"{where}: missing {key!r}")
        for key, value in row.items():
            if not isinstance(value, str) or (key == "prompt" and not value):
                raise UserError(f"{where}: {key!r} must be a non-empty string, got {value!r}")
        out.append(Example(row["prompt"], row.get("target", row["answer"]), row["answer"]))
    if not out:
        raise UserError(f"task dataset {path}: no examples")
    return out


class JsonlTask(Task):
    """A finite dataset: training draws from it with replacement across steps. The
    held-out examples (at most `heldout_size`) are `eval_path`'s, or else a
    `heldout_frac` share of `train_path`'s prompts (by a hash with `seed`)."""

    def __init__(
        self,
        train_path: str | Path,
        verifier: Verifier,
        *,
        eval_path: str | Path | None,
        seed: int,
        heldout_size: int,
        heldout_frac: float,
    ):
        super().__init__(verifier)
        self.seed = seed
        train = read_jsonl(train_path)
        if eval_path is not None:
            heldout = read_jsonl(eval_path)
            held_prompts = {ex.prompt for ex in heldout}
            train = [ex for ex in train if ex.prompt not in held_prompts]
        else:
            split = [in_heldout(ex.prompt, seed, heldout_frac) for ex in train]
            heldout = [ex for ex, h in zip(train, split, strict=True) if h]
            train = [ex for ex, h in zip(train, split, strict=True) if not h]
        if not train:
            raise UserError(
                f"task dataset {train_path}: no training examples left after "
                "removing the held-out prompts"
            )
        if not heldout:
            raise UserError(
                f"task dataset {train_path}: the held-out split is empty; "
                "give task.eval_path or raise task.heldout_frac"
            )
        self.train = train
        self._heldout = heldout[:heldout_size]

    def heldout(self) -> list[Example]:
        return list(self._heldout)

    def sample_train(self, k: int, seed: int | str) -> list[Example]:
        rng = random.Random(f"train:jsonl:{self.seed}:{seed}")
        if k <= len(self.train):
            return rng.sample(self.train, k)
        return [rng.choice(self.train) for _ in range(k)]

    @property
    def max_target_chars(self) -> int:
        return max(len(ex.target) for ex in self.train + self._heldout)
