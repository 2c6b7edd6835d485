"""`minirl config`: the whole run config in one place, every key with its meaning."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import yaml

from core.config_docs import annotated_yaml, field_docs
from core.typed_config import to_data
from trainer.config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_reference_yaml_is_the_commands_output_and_loads_back_as_the_defaults():
    from trainer.config_cli import render

    reference = ROOT / "configs" / "reference.yaml"
    assert reference.read_text() == render(None, []), "regenerate: minirl config --out ..."
    assert load_config(reference) == RunConfig()


def test_every_field_of_every_section_is_explained():
    """A key is explained by its own docstring, or by its class's docstring naming it
    (`key`), as the detector rules do for the parameters they share."""
    unexplained: set[str] = set()

    def walk(obj):
        docs, about = field_docs(type(obj)), type(obj).__doc__ or ""
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value)
            elif f.init and f.name not in docs and f"`{f.name}`" not in about:
                unexplained.add(f"{type(obj).__name__}.{f.name}")

    walk(RunConfig())
    assert not unexplained, sorted(unexplained)


def test_annotated_yaml_round_trips_overrides_and_comments_each_key():
    cfg = load_config(None, ["train.mini_batches=4", "loss.clip=false", "name=x"])
    lines = annotated_yaml(cfg)
    assert yaml.safe_load("\n".join(lines)) == to_data(cfg)
    i = lines.index("name: x")
    assert lines[i - 1].startswith("# Run name")


def test_the_command_refuses_a_bad_key_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "config", "--set", "train.nope=1"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "nope" in out.stderr
