"""Docstrings and comments say what the code does and why, not what a benchmark measured.

Benchmark numbers, seed ranges and tuning history go stale the day the benchmark is
rerun; they live in bench/results/, and the code points there. Module docstrings stay
short enough to read at a glance.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minirl", "core", "monitor", "trainer", "dashboard", "app", "bench")
MAX_MODULE_DOC_LINES = 15
"""Non-blank lines of a module docstring, at most."""

BENCHMARK_LIKE = [
    re.compile(r"\b\d+ of \d+\b"),  # "31 of 35 seeds"
    re.compile(r"\bseeds? \d+\s*[-–]\s*\d+"),  # "seeds 0-2", "seed 37–104"
    re.compile(r"\bseeds \d+(?:\s*,\s*\d+)+"),  # "seeds 1, 2, 3"
    re.compile(r"\bseeds \d+ (?:and|to) \d+"),  # "seeds 0 and 4"
    re.compile(r"\b\d+\.\d+\s?%"),  # "80.2 %"
    re.compile(r"\b\d+(?:\.\d+)?\s?[x×] (?:faster|slower)\b"),  # "20× faster"
]
FRACTION = re.compile(r"(?<![\w./])(\d+)/(\d+)(?![\w/])")


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def benchmark_like(text: str) -> list[str]:
    """The benchmark-like numbers in `text`: counts out of a total ("37/40", "31 of 35"),
    seed ranges, decimal percentages, speed-ups. A fraction counts when its numerator is at
    most its denominator, the denominator is 10 or more and not both are powers of two, so
    that 1/2, 0/1 masks and 1/64 scales pass."""
    found = [m.group() for pattern in BENCHMARK_LIKE for m in pattern.finditer(text)]
    for m in FRACTION.finditer(text):
        num, den = int(m.group(1)), int(m.group(2))
        if num <= den and den >= 10 and not (_power_of_two(num) and _power_of_two(den)):
            found.append(m.group())
    return found


def _sources() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        if (ROOT / package).is_dir()
        for path in (ROOT / package).rglob("*.py")
        if ".venv" not in path.parts
    )


def _texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring, attribute docstring and comment of a module."""
    texts = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            texts.append((node.lineno, node.value.value))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            texts.append((token.start[0], token.string))
    return texts


@pytest.mark.parametrize(
    "text",
    [
        "IS off ended above IS on in 31 of 35 seeds, by 8 points on average",
        "paged within 600 steps: 37/40 → 5/40",
        "learnt in ~250 SFT steps (seeds 0-2: 30 % sampled accuracy)",
        "the whole table: 80.2 % with seeds 1-38",
        "plain Python is ~20× faster than np.median",
        "lab seeds 0 and 4 tune",
    ],
)
def test_pattern_catches_benchmark_numbers(text):
    assert benchmark_like(text)


@pytest.mark.parametrize(
    "text",
    [
        "M_t as a float 0/1 tensor [B, T]",
        "top-k index tensors [B, T, L, k], mean |A ∩ B| / k",
        "the IS cap C = 5, IcePop band [0.5, 5], ε 0.2/0.27",
        "a 1/64 scale per block of 32 values, 127.0.0.0/8",
        "≥ 5 % of tokens past the IS cap; bootstrap 95 % intervals",
        "minirl bench remediation [--seeds 1 2] [--jobs 2]",
        "arXiv 2512.01374 eq. 7, version 0.16.1, lr 1.0e-4",
    ],
)
def test_pattern_passes_maths_and_shapes(text):
    assert benchmark_like(text) == []


def test_module_docstrings_are_short():
    long = []
    for path in _sources():
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        lines = [line for line in doc.splitlines() if line.strip()]
        if len(lines) > MAX_MODULE_DOC_LINES:
            long.append(f"{path.relative_to(ROOT)}: {len(lines)} lines")
    assert not long, f"module docstrings over {MAX_MODULE_DOC_LINES} lines:\n" + "\n".join(long)


def test_no_benchmark_numbers_in_docstrings_or_comments():
    hits = []
    for path in _sources():
        for line, text in _texts(path.read_text()):
            for found in benchmark_like(text):
                hits.append(f"{path.relative_to(ROOT)}:{line}: {found!r}")
    assert not hits, "benchmark numbers belong in bench/results/:\n" + "\n".join(hits)
