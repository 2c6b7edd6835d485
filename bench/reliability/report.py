"""bench/results/reliability.md (+ .json): the fault table, the fuzzing counts, the holes."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

HOLES = (
    ("1. a run killed before its first complete checkpoint cannot be recovered",
     "resumes from its start (the cold-start state) and says so",
     "tests/test_trainer_faults.py::test_a_run_killed_before_its_first_checkpoint_resumes_from_its_start"),
    ("2. `minirl import`: tracebacks on hostile logs; an empty name stops the import; a CSV "
     "with a BOM has no step column",
     "garbage lines skipped and counted; bad names skipped; BOM read",
     "tests/test_import_garbage.py, tests/test_fuzz_inputs.py::test_importers"),
    ("3. a damaged store gives tracebacks; one bad run hides every run; nothing salvages",
     "the unreadable part is named, analyze/export go on with the rest; `minirl repair`",
     "tests/test_store_damage.py"),
    ("4. non-finite training ends in a traceback; a collapsed run reports \"completed\"",
     "skipped and recorded, 3 in a row stop (exit 1); collapse said (exit 3 on request)",
     "tests/test_trainer_faults.py (non_finite, lr_1e8, collapse)"),
    ("5. config validation gaps (deep YAML, huge ints, 2^64 windows, NaN, duplicate keys)",
     "refused in one line by the shared loader", "tests/test_config_limits.py"),
    ("6. processes and files left behind; the token visible in `ps`",
     "SIGTERM stops children; leftovers removed on start; --token-file / env, --token warned",
     "tests/test_trainer_faults.py::test_files_of_killed_processes_are_removed_on_start, "
     "tests/test_reliability.py"),
)  # fmt: skip


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def write(results: dict[str, Any], out: Path, command: str, seconds: float) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    lines = [
        "# Reliability benchmark (`minirl bench reliability`)",
        "",
        f"Command: `{command}`  ",
        f"Machine: {platform.machine()}, {platform.python_version()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; {seconds / 60:.1f} min.",
        "",
        "## Faults injected",
        "",
        "Every fault is injected into the real command (a subprocess), then recovered the "
        "documented way (`minirl train CONFIG --resume`; `Monitor(run_dir, resume=True)`). "
        "*Lost* is what an uninterrupted run has that the recovered one does not.",
        "",
        _row(["fault", "times injected", "what was lost", "checks passed"]),
        _row(["---"] * 4),
    ]
    lines += [_row(r) for r in results["faults"]]
    lines += [
        "",
        "## Fuzzing (hypothesis)",
        "",
        "Inputs generated per parser; a rejection is one `UserError` line naming the input "
        "and the reason (`bad messages` counts those that were not); a traceback is any "
        "other exception.",
        "",
        _row(
            [
                "parser",
                "inputs",
                "accepted",
                "rejected (one line)",
                "bad messages",
                "tracebacks",
                "notes",
            ]
        ),
        _row(["---"] * 7),
    ]
    for t in results["fuzzing"]:
        notes = "; ".join(f"{k}: {v}" for k, v in t["notes"].items())
        lines.append(
            _row(
                [
                    t["parser"],
                    t["tried"],
                    t["accepted"],
                    t["rejected"],
                    t["bad_messages"],
                    t["tracebacks"],
                    notes,
                ]
            )
        )
        lines += [f"  - failure: `{f}`" for f in t["failures"]]
    lines += [
        "",
        "## The holes of issue 19, closed",
        "",
        _row(["hole", "now", "test (failed before the fix)"]),
        _row(["---"] * 3),
    ]
    lines += [_row(list(h)) for h in HOLES]
    failures = results.get("failed", [])
    lines += ["", f"Failed checks: {', '.join(failures) if failures else 'none'}.", ""]
    out.write_text("\n".join(lines))
    return out
