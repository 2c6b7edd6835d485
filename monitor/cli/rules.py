"""`minirl prometheus-rules`: print the alert rules (YAML) for Prometheus.

The levels are the detectors' defaults, or those of a monitor config file (the `monitor`
section of a run config, or a bare MonitorConfig mapping) given with `--config`.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _load_config(path: Path):  # -> MonitorConfig
    from core.typed_config import read_yaml_mapping
    from monitor.config import MonitorConfig

    data = read_yaml_mapping(path, "monitor config")
    if isinstance(data.get("monitor"), dict):
        data = data["monitor"]
    return MonitorConfig.from_dict(data)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser("minirl prometheus-rules", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="YAML with a `monitor:` section (or bare)")
    parser.add_argument("--out", type=Path, help="write to this file instead of stdout")
    args = parser.parse_args(argv)

    from monitor.alerting.rules import rules_yaml

    text = rules_yaml(_load_config(args.config) if args.config else None)
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")
    return 0
