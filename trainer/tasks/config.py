"""`TaskConfig`: which verifiable task a run trains and evaluates on.

Only the section's fields and their rules; the tasks themselves are in `generated.py`
(arithmetic and string tasks made up on the fly) and `jsonl.py` (a user's dataset).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.typed_config import check

Kind = Literal["add", "add_trace", "reverse", "sort", "jsonl"]


@dataclass(frozen=True)
class TaskConfig:
    """A task: prompts, the full target each one should be answered with (for the cold
    start), and a verifier giving reward 1 to a correct final answer, else 0."""

    kind: Kind = "add"
    """add: `347+685=` -> `1032` (a few tokens; fits the default sampling cap of 16).
    add_trace: the same sum written out digit by digit with its carries, then the answer
    (10*digits+1 characters: long enough to stress the first-order approximation; raise
    sampling.max_new_tokens to match). reverse: a string of `digits` letters, reversed.
    sort: `digits` digits, sorted. jsonl: a user dataset (train_path)."""
    digits: int = 2
    """Difficulty: digits per operand (add, add_trace) or string length (reverse, sort).
    With the default tiny MoE, add is learnt at 2 digits but not at 3 (the answer needs
    the whole carry chain at once); add_trace, which writes the chain out, is learnt at
    3 and 4 digits (`minirl bench coldstart`)."""
    seed: int = 0
    """Split seed: decides which examples are held out and which prompts are drawn."""
    heldout_size: int = 200
    """Held-out examples used for eval/acc (all of eval_path/the held-out split if fewer
    are available for jsonl)."""
    heldout_frac: float = 0.1
    """Share of all possible examples reserved for the held-out split (by a hash of the
    prompt and seed, so train and held-out never share a prompt)."""
    train_path: str | None = None
    """jsonl only: a file of {"prompt": ..., "answer": ...} lines (optional "target": the
    full response to imitate in the cold start; defaults to the answer)."""
    eval_path: str | None = None
    """jsonl only: held-out file in the same format; None splits train_path by hash."""
    verifier: str = "exact"
    """exact (stripped strings equal) | numeric (last number in the response equals the
    answer's within 1e-6 relative) | module:function, called as f(final_answer, answer)
    and returning a bool or a number in {0, 1}."""

    def __post_init__(self) -> None:
        check(self.digits >= 1, "digits", self.digits, "an integer >= 1")
        if self.kind in ("add", "add_trace"):
            check(self.digits <= 18, "digits", self.digits, "1..18 for additions")
        check(self.heldout_size >= 1, "heldout_size", self.heldout_size, "an integer >= 1")
        check(
            0.0 < self.heldout_frac < 1.0, "heldout_frac", self.heldout_frac, "a number in (0, 1)"
        )
        if self.kind == "jsonl":
            check(self.train_path is not None, "train_path", None, "a path, for kind=jsonl")
        else:
            for name in ("train_path", "eval_path"):
                value = getattr(self, name)
                check(value is None, name, value, f"null unless kind=jsonl (kind={self.kind})")
        builtin = self.verifier in ("exact", "numeric")
        module, _, func = self.verifier.partition(":")
        check(
            builtin or bool(module and func),
            "verifier",
            self.verifier,
            "exact, numeric or module:function",
        )
