"""damek/assignment5-alignment: console logs of its GRPO loop (cs336_alignment/grpo_train_loop.py)
-> one corpus row per GRPO iteration (the source's `grpo_iteration`, from 0).

Per iteration the script prints, before training on the rollouts, `histogram:  {...}` (counts
of the 256 rollouts by format and answer reward) and `Percentage of correct examples:  x`
(the first count over the total; the script's `batch_accuracy`), then one `GRPO Iteration:
N Epoch: E Microbatch: i / n` line per microbatch; on evaluation, `GRPO Iteration N, Epoch E,
Evaluating...` and the same two lines over the 1,319 GSM8K test questions (`val_accuracy`).
A row: `batch_accuracy` and the counts as `hist_format1_answer1` ('correct with both format
and answer reward 1'), `hist_format1_answer0` ('format reward 1 and answer reward 0'),
`hist_format0_answer0` ('format reward 0 and answer reward 0'); an evaluation's numbers on the
row of the iteration it follows, as `val_accuracy`, `val_hist_*`. Values as printed. Checked:
counts sum to the rollouts (test questions), each printed fraction is its count over the sum,
iterations rise by one, microbatch lines and optimizer steps match each iteration, every log
version identical. A step-like line that does not parse raises.
Usage: python cs336_damek.py <mirror git dir> <out dir>
"""

from __future__ import annotations

import ast
import re
import sys

from _mirror import git, write_rows

RUNS = [  # (corpus id, commit, path)
    (
        "c9_damek_train_loop",
        "f424f199f65caac6d2b6873253ce0d9ced4dd4b0",
        "cs336_alignment/outputs/grpo_train_loop_log.txt",
    ),
    (
        "c9_damek_prompt_ablation",
        "36c7421116d6a2f07b9dcebb81fd2dec6ee509f7",
        "cs336_alignment/outputs/grpo_prompt_ablation.txt",
    ),
]
ROLLOUTS = 256  # the script's default --rollout_batch_size (and train_batch_size)
TEST_SET = "data/gsm8k/test.jsonl"  # the script's default --eval_dataset_path
KEYS = {  # the histogram's keys (utils.count_histogram) -> row names
    "correct with both format and answer reward 1": "hist_format1_answer1",
    "format reward 1 and answer reward 0": "hist_format1_answer0",
    "format reward 0 and answer reward 0": "hist_format0_answer0",
}
CORRECT = "correct with both format and answer reward 1"
MICROBATCH = re.compile(
    r"^GRPO Iteration:  (\d+) Epoch:  (\d+) Microbatch:  (\d+) / (\d+)"
    r"(?: total_samples_processed:  (\d+))?$"
)
EVALUATING = re.compile(
    r"^GRPO Iteration (\d+), Epoch (\d+), Evaluating\.\.\.(?: Total samples processed: (\d+))?$"
)
HISTOGRAM = re.compile(r"^histogram:  (\{.*\})$")
PERCENTAGE = re.compile(r"^Percentage of correct examples:  (\S+)$")
LOOKS_LIKE = ("GRPO Iteration", "histogram", "Percentage of correct")
# the line each script version prints once per optimizer step
OPTIMIZER_STEP = ("[MEM cuda:1][after step] ", "Taking optimizer step...")


def _histogram(text: str, n: int) -> dict[str, int]:
    hist = ast.literal_eval(text)
    if not isinstance(hist, dict) or set(hist) != set(KEYS):
        raise ValueError(f"line {n}: histogram keys {list(hist)}")
    if not all(type(v) is int for v in hist.values()):
        raise ValueError(f"line {n}: histogram counts {hist}")
    return hist


def _record(hist: dict[str, int], pct: str, total: int, n: int, prefix: str) -> dict:
    """The histogram and its printed fraction, checked: counts sum to `total`, and the
    fraction is the correct count over the sum, as the script computes it."""
    if sum(hist.values()) != total:
        raise ValueError(f"line {n}: histogram sums to {sum(hist.values())}, not {total}")
    value = float(pct)
    if value != hist[CORRECT] / sum(hist.values()):
        raise ValueError(f"line {n}: {pct} is not {hist[CORRECT]}/{sum(hist.values())}")
    name = "val_accuracy" if prefix else "batch_accuracy"
    return {name: value} | {prefix + KEYS[k]: v for k, v in hist.items()}


class _Step:
    def __init__(self, step: int, row: dict) -> None:
        self.step, self.row = step, row
        self.microbatches: list[tuple[int, int, int]] = []  # (epoch, i, of) as printed
        self.updates = 0  # optimizer steps

    def trained(self) -> bool:
        """One epoch of microbatches whose `i` runs 0, s, 2s, ... up to `of`, then one
        optimizer step (both script versions: train batch = rollout batch)."""
        mbs = self.microbatches
        if len(mbs) < 2:
            return False
        of, stride = mbs[0][2], mbs[1][1]
        want = [(0, i, of) for i in range(0, of, stride)]
        return stride > 0 and mbs == want and self.updates == 1


def rows_of(text: str, test_questions: int) -> tuple[list[dict], int, bool]:
    """Rows of one log, its number of evaluations, and whether its last iteration trained."""
    steps: list[_Step] = []
    lines = text.split("\n")
    evaluating: int | None = None  # the iteration whose evaluation is being printed
    samples, increment = 0, 0  # total_samples_processed so far, when the log prints it
    evals = 0
    for n, line in enumerate(lines, 1):
        if line.startswith(OPTIMIZER_STEP) and steps:
            steps[-1].updates += 1
        if not line.startswith(LOOKS_LIKE):
            continue
        if m := MICROBATCH.match(line):
            it, epoch, i, of = (int(g) for g in m.groups()[:4])
            if not steps or it != steps[-1].step or evaluating is not None:
                raise ValueError(f"line {n}: microbatch of iteration {it} out of place")
            steps[-1].microbatches.append((epoch, i, of))
            if m.group(5) is not None:
                increment = increment or int(m.group(5))  # the microbatch size
                samples += increment
                if int(m.group(5)) != samples:
                    raise ValueError(f"line {n}: total_samples_processed {m.group(5)}")
            continue
        if m := EVALUATING.match(line):
            it = int(m.group(1))
            if not steps or it != steps[-1].step or evaluating is not None:
                raise ValueError(f"line {n}: evaluation of iteration {it} out of place")
            if not steps[-1].trained():
                raise ValueError(f"line {n}: evaluation before iteration {it} trained")
            if m.group(3) is not None and int(m.group(3)) != samples:
                raise ValueError(f"line {n}: {m.group(3)} samples, counted {samples}")
            evaluating = it
            continue
        m = HISTOGRAM.match(line)
        pct = PERCENTAGE.match(lines[n]) if n < len(lines) else None
        if m is None or pct is None:
            if PERCENTAGE.match(line) and HISTOGRAM.match(lines[n - 2]):
                continue  # the fraction of the histogram just read
            raise ValueError(f"line {n}: {line[:80]!r} does not parse")
        hist = _histogram(m.group(1), n)
        if evaluating is not None:  # the held-out set, after iteration `evaluating` trained
            steps[-1].row.update(_record(hist, pct.group(1), test_questions, n, "val_"))
            evaluating = None
            evals += 1
        else:  # the rollouts of a new iteration, before it trains
            if steps and not steps[-1].trained():
                raise ValueError(f"line {n}: iteration {steps[-1].step} did not finish")
            step = steps[-1].step + 1 if steps else 0  # rises by one from 0
            row = {"step": step} | _record(hist, pct.group(1), ROLLOUTS, n, "")
            steps.append(_Step(step, row))
    if evaluating is not None:
        raise ValueError("an evaluation without its histogram")
    if not steps:
        raise ValueError("no iterations")
    return [s.row for s in steps], evals, steps[-1].trained()


def main(git_dir: str, out: str) -> None:
    for run_id, commit, path in RUNS:
        # every committed version of the file is this one
        commits = git(git_dir, "log", "--all", "--format=%H", "--", path).split()
        blobs = set()
        for c in commits:
            listed = git(git_dir, "ls-tree", c, "--", path).split()
            if listed:
                blobs.add(listed[2])
        if blobs != {git(git_dir, "rev-parse", f"{commit}:{path}").strip()}:
            raise ValueError(f"{path}: {len(blobs)} versions in the history")
        questions = len(git(git_dir, "show", f"{commit}:{TEST_SET}").splitlines())
        rows, evals, last = rows_of(git(git_dir, "show", f"{commit}:{path}"), questions)
        write_rows(out, run_id, rows)
        cut = "" if last else f" (iteration {rows[-1]['step']}'s training cut short)"
        print(f"{run_id}\t{path}\t{len(rows)} steps, {evals} evals{cut}\t{commit}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
