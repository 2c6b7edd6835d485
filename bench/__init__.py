"""bench: the stability lab and every benchmark, run by `minirl bench NAME` (`cli.py`).

`lab/` runs the paper's matrix and the detection benchmark, `speed/` measures what the
toolkit costs; `engines.py`, `store.py`, `dashboard_render.py` and `coldstart.py` time
one component each. Every result file goes to `bench/results/` with the command that
produced it. This package imports trainer, monitor, minirl and dashboard; none of them
imports it.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The source checkout: configs/, bench/results/ and the lab's default run folders."""
RESULTS = REPO / "bench" / "results"
IMAGES = REPO / "docs" / "images"
"""Screenshots: documentation pictures, beside the pages that show them."""
