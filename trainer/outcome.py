"""How a run ended, in one line: why it stopped, and whether held-out accuracy collapsed.

A run that reaches its last step "completed", but a completed run may have lost what it
learned: held-out accuracy falling from 0.31 to 0.00 must not read as a success. The
collapse test is the monitor's own drop rule for held-out accuracy
(`monitor.detectors.eval_collapse`): the peak of the evaluations gained at least
`min_peak_gain` over `zero` (a policy that learned nothing), and the last evaluation has
lost at least `crit_drop` of that gain. `minirl train --fail-on-collapse` turns a
collapse into exit code EXIT_COLLAPSED.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.detectors.rules import DropRule

EXIT_OK, EXIT_STOPPED, EXIT_COLLAPSED, EXIT_INTERRUPTED = 0, 1, 3, 130
"""Exit codes of `minirl train`: finished (completed, or a stop action); stopped by a
fault (non-finite steps); completed with a collapse, under --fail-on-collapse;
interrupted (Ctrl-C or SIGTERM, as a shell reports it). (2 is a user error: a bad config,
a run dir in use.)"""


def collapse(steps: Sequence[int], accs: Sequence[float], rule: DropRule) -> str | None:
    """A sentence saying that held-out accuracy collapsed, or None if it did not."""
    if len(accs) < 2:
        return None
    peak_i = max(range(len(accs)), key=lambda i: (accs[i], -i))
    peak, final = accs[peak_i], accs[-1]
    gain = peak - rule.zero
    if gain < rule.min_peak_gain or (peak - final) / gain < rule.crit_drop:
        return None
    return (
        f"held-out accuracy collapsed: {peak:.3f} at step {steps[peak_i]} -> {final:.3f} at "
        f"step {steps[-1]}, {(peak - final) / gain:.0%} of its gain over {rule.zero:g} lost"
    )


def exit_code(stopped: str, collapsed: str | None, fail_on_collapse: bool) -> int:
    if stopped == "interrupted":
        return EXIT_INTERRUPTED
    if stopped not in ("completed", "stop action"):
        return EXIT_STOPPED
    return EXIT_COLLAPSED if collapsed and fail_on_collapse else EXIT_OK
