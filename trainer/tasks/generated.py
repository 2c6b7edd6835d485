"""Tasks generated on the fly: additions (short or written out) and string tasks.

Each kind is a small `draw` function (a random example from an RNG) plus the size of
its example space, so that the held-out split can be checked to be feasible. The
written-out addition exists for the lab's purpose: the sequence-level IS weight is a
product over tokens, so its breakdown only shows on responses of tens of tokens, not three.
Formats were chosen for a tiny char-level MoE: the fixed-width carry trace of 3-digit
sums is learnt by the default Qwen3-MoE in a CPU-minute of SFT (`minirl bench
coldstart` measures it).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from core.errors import UserError
from trainer.tasks.base import Example, Task, in_heldout
from trainer.tasks.verifiers import Verifier

ANSWER_MARKER = ">"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
MAX_TRIES_PER_EXAMPLE = 1000  # rejection sampling of one side of the split


def add_trace_target(a: int, b: int) -> str:
    """The written-out sum, least significant digit first, one fixed-width step per
    digit (`x+y+carry=two-digit sum`), then the marker and the answer:
    347+685 -> `7+5+0=12,4+8+1=13,3+6+1=10>1032`."""
    steps, carry = [], 0
    for x, y in zip(reversed(str(a)), reversed(str(b)), strict=True):
        total = int(x) + int(y) + carry
        steps.append(f"{x}+{y}+{carry}={total:02d}")
        carry = total // 10
    return ",".join(steps) + ANSWER_MARKER + str(a + b)


def _operand(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _draw_add(rng: random.Random, digits: int) -> Example:
    a, b = _operand(rng, digits), _operand(rng, digits)
    return Example(f"{a}+{b}=", str(a + b), str(a + b))


def _draw_add_trace(rng: random.Random, digits: int) -> Example:
    a, b = _operand(rng, digits), _operand(rng, digits)
    return Example(f"{a}+{b}=", add_trace_target(a, b), str(a + b))


def _draw_reverse(rng: random.Random, digits: int) -> Example:
    s = "".join(rng.choice(LETTERS) for _ in range(digits))
    return Example(f"{s}=", s[::-1], s[::-1])


def _draw_sort(rng: random.Random, digits: int) -> Example:
    s = "".join(rng.choice("0123456789") for _ in range(digits))
    return Example(f"{s}=", "".join(sorted(s)), "".join(sorted(s)))


def _operands(digits: int) -> int:
    return 10 if digits == 1 else 9 * 10 ** (digits - 1)


# kind -> (draw, number of distinct prompts, longest target in characters)
KINDS: dict[
    str, tuple[Callable[[random.Random, int], Example], Callable[[int], int], Callable[[int], int]]
] = {
    "add": (_draw_add, lambda d: _operands(d) ** 2, lambda d: d + 1),
    "add_trace": (_draw_add_trace, lambda d: _operands(d) ** 2, lambda d: 9 * d + d + 1),
    "reverse": (_draw_reverse, lambda d: len(LETTERS) ** d, lambda d: d),
    "sort": (_draw_sort, lambda d: 10**d, lambda d: d),
}


class GeneratedTask(Task):
    """An endless generated task of a `kind` of KINDS at `digits`, with a fixed held-out
    split of `heldout_size` examples drawn from a `heldout_frac` share of the prompts
    (by a hash with `seed`, see base.in_heldout)."""

    def __init__(
        self,
        kind: str,
        verifier: Verifier,
        *,
        digits: int,
        seed: int,
        heldout_size: int,
        heldout_frac: float,
    ):
        super().__init__(verifier)
        self.kind, self.digits, self.seed = kind, digits, seed
        self.heldout_size, self.heldout_frac = heldout_size, heldout_frac
        self._draw, space, longest = KINDS[kind]
        self.space = space(digits)
        self._longest = longest(digits)
        self.answer_marker = ANSWER_MARKER if kind == "add_trace" else None
        # Expect ≈ space·frac held-out prompts: ask for at most half of them, so that
        # drawing distinct ones stays fast.
        if self.space * heldout_frac < 2 * heldout_size:
            raise UserError(
                f"task: {kind} with digits={digits} has {self.space} distinct prompts, "
                f"too few for heldout_size={heldout_size} at heldout_frac="
                f"{heldout_frac} (needs space*frac >= 2*heldout_size); raise digits"
            )
        self._heldout: list[Example] | None = None

    def _draw_side(self, rng: random.Random, heldout: bool) -> Example:
        for _ in range(MAX_TRIES_PER_EXAMPLE):
            ex = self._draw(rng, self.digits)
            if in_heldout(ex.prompt, self.seed, self.heldout_frac) == heldout:
                return ex
        raise RuntimeError("split rejection sampling did not terminate")  # frac in (0,1)

    def heldout(self) -> list[Example]:
        if self._heldout is None:
            rng = random.Random(f"heldout:{self.kind}:{self.digits}:{self.seed}")
            seen: dict[str, Example] = {}
            while len(seen) < self.heldout_size:
                ex = self._draw_side(rng, heldout=True)
                seen.setdefault(ex.prompt, ex)
            self._heldout = list(seen.values())
        return list(self._heldout)

    def sample_train(self, k: int, seed: int | str) -> list[Example]:
        rng = random.Random(f"train:{self.kind}:{self.digits}:{self.seed}:{seed}")
        return [self._draw_side(rng, heldout=False) for _ in range(k)]

    @property
    def max_target_chars(self) -> int:
        return self._longest
