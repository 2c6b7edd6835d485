"""Property-based fuzzing of every input parser (issue 19): a few hundred generated inputs
each here, thousands in `minirl bench reliability`. Zero tracebacks; every rejection is
one line naming the input and the reason; garbage lines are skipped and counted, never
fatal to the good lines around them (bench/reliability/fuzz_*.py say what is generated)."""

from __future__ import annotations

import pytest

from bench.reliability import fuzz_configs, fuzz_importers, fuzz_operator
from bench.reliability.fuzzing import Tally

N = 200


def _clean(tally: Tally) -> None:
    assert tally.tried >= N * 0.9, f"{tally.parser}: only {tally.tried} inputs generated"
    assert tally.tracebacks == 0 and tally.bad_messages == 0, "\n".join(tally.failures)


def test_run_config_files():
    tally = fuzz_configs.fuzz_config_files(N)
    _clean(tally)
    assert tally.rejected > N / 2  # hostile on purpose: most are refused, in one line


def test_set_overrides():
    _clean(fuzz_configs.fuzz_overrides(N))


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tensorboard", "console"])
def test_importers(fmt):
    tally = fuzz_importers.fuzz_importer(fmt, N, import_every=10)
    _clean(tally)
    # every 10th file the parser reads is also imported whole; how many of the N files it
    # reads depends on what hypothesis generates, which depends on what ran before it in
    # the process (TensorBoard's, run alone: 8 full imports; in the suite: 10 or more)
    assert tally.notes["garbage units skipped"] > N / 2 and tally.notes["full imports"] >= N / 40


@pytest.mark.parametrize(
    "target",
    [
        fuzz_operator.fuzz_action_requests,
        fuzz_operator.fuzz_operator_token,
        fuzz_operator.fuzz_import_form,
        fuzz_operator.fuzz_webhook,
        fuzz_operator.fuzz_monitor_writer,
    ],
)
def test_operator_and_integration_inputs(target):
    _clean(target(N))
