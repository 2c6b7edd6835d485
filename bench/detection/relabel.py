"""Rewrite the `label` and `onset` of every public run in `bench/data/real/labels.json`
with what the code's rule (`corpus.label_run`) gives, so the file never holds a label set
by hand. Run from the repository root: `python -m bench.detection.relabel`."""

from __future__ import annotations

import json
from collections import Counter

from bench.detection import corpus


def main() -> None:
    path = corpus.DATA / "real" / "labels.json"
    labels = json.loads(path.read_text())
    for run in corpus.real_runs():
        entry = labels[run.name.removeprefix("real/")]
        entry["label"], entry["onset"] = run.label, run.onset
    path.write_text(json.dumps(labels, indent=1, ensure_ascii=False) + "\n")
    print(dict(Counter(e["label"] for e in labels.values())), f"{len(labels)} runs")


if __name__ == "__main__":
    main()
