"""What every task offers the trainer: examples, a held-out set, a reward.

A task hands out text; it knows nothing about tokens, models or engines. Train and
held-out examples never share a prompt: a hash of (seed, prompt) puts each possible
prompt on one side for good (`in_heldout`), so the split does not depend on how many
examples were drawn, nor on the process (Python's own `hash` is salted; this is not).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from trainer.tasks.verifiers import Verifier


@dataclass(frozen=True)
class Example:
    """One prompt with its cold-start target and the answer the verifier checks."""

    prompt: str
    target: str
    """The whole response to imitate in the cold start (a trace, then the answer)."""
    answer: str
    """The reference final answer that the reward compares with."""


def in_heldout(prompt: str, seed: int, frac: float) -> bool:
    """True if `prompt` belongs to the held-out split of `seed` (about a `frac` share)."""
    digest = hashlib.blake2b(f"{seed}\x00{prompt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < frac * 2.0**64


class Task:
    """Base of every task: the reward = verifier(final answer of the response, answer)."""

    answer_marker: str | None = None
    """If set, the final answer is the text after the last marker; none -> reward 0."""

    def __init__(self, verifier: Verifier):
        self.verifier = verifier

    def final_answer(self, response: str) -> str | None:
        """The part of a response that the verifier judges (None: there is none)."""
        if self.answer_marker is None:
            return response
        if self.answer_marker not in response:
            return None
        return response.rsplit(self.answer_marker, 1)[1]

    def reward(self, response: str, answer: str) -> float:
        """1.0 if the response's final answer is correct, else 0.0."""
        final = self.final_answer(response)
        return 0.0 if final is None else self.verifier(final, answer)

    def heldout(self) -> list[Example]:
        """The fixed held-out examples (the same list on every call)."""
        raise NotImplementedError

    def sample_train(self, k: int, seed: int | str) -> list[Example]:
        """k training examples, a deterministic function of (task, k, seed)."""
        raise NotImplementedError

    @property
    def max_target_chars(self) -> int:
        """The longest target, in characters: a floor for max_new_tokens (plus EOS)."""
        raise NotImplementedError
