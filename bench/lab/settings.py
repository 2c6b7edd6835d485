"""The stability lab's matrix: the paper's settings, one recipe file each, and its runs.

The matrix (arXiv 2512.01374, section 5): on-policy MiniRL, without IS correction, with
length normalisation, +R3; off-policy 2x, 4x, 8x with MiniRL without clipping, +R2 without
clipping, +R2, +R3. One recipe file per setting in configs/lab/ (base.yaml plus the keys
it changes); every setting shares the base's induced training-inference mismatch. Seeds
vary the RL loop (prompt order, sampling); the cold start is shared, as the paper's runs
share their base model. Runs go seed-major, so a partial lab covers every setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench import REPO
from bench.lab.manifest import RunSpec
from core.errors import UserError

CONFIG_DIR = REPO / "configs" / "lab"


@dataclass(frozen=True)
class Setting:
    """One cell of the paper's matrix: a recipe file and where it sits in the tables."""

    name: str
    """The recipe's file stem in configs/lab/ and its folder under the lab directory."""
    group: str
    """on-policy, off-policy 2x, 4x or 8x: the rows compared in one chart."""
    label: str


SETTINGS: tuple[Setting, ...] = (
    Setting("onpolicy_minirl", "on-policy", "MiniRL"),
    Setting("onpolicy_no_is", "on-policy", "MiniRL w/o IS correction"),
    Setting("onpolicy_length_norm", "on-policy", "MiniRL + length norm"),
    Setting("onpolicy_r3", "on-policy", "MiniRL + R3"),
    *(
        Setting(f"offpolicy{n}x_{variant}", f"off-policy {n}x", label)
        for n in (2, 4, 8)
        for variant, label in (
            ("noclip", "MiniRL w/o clipping"),
            ("r2_noclip", "MiniRL + R2 w/o clipping"),
            ("r2", "MiniRL + R2"),
            ("r3", "MiniRL + R3"),
        )
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
QUICK_SETTINGS = ("onpolicy_minirl", "onpolicy_no_is", "offpolicy8x_noclip", "offpolicy8x_r3")
QUICK_STEPS, QUICK_SEEDS = 40, 1
FULL_STEPS, FULL_SEEDS = 200, 3


def lab_specs(
    lab_dir: Path,
    settings: list[str],
    seeds: int,
    steps: int | None,
    extra: list[str],
    config_dir: Path = CONFIG_DIR,
) -> list[RunSpec]:
    """Every run of the lab, seed-major: seed 0 of every setting first."""
    specs = []
    for seed in range(seeds):
        for name in settings:
            config = (config_dir / f"{name}.yaml").resolve()
            if not config.is_file():
                raise UserError(f"setting {name}: no recipe {config}")
            overrides = [f"seed={seed}", f"name={name}_s{seed}"]
            if steps is not None:
                overrides.append(f"train.steps={steps}")
            specs.append(
                RunSpec(
                    key=f"{name}/seed{seed}",
                    config=str(config),
                    overrides=(*overrides, *extra),
                    run_dir=str((lab_dir / name / f"seed{seed}").resolve()),
                )
            )
    return specs
