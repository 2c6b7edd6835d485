"""What `pip install` does with the project's metadata: a torch-free core, extras that keep
a user's own torch.

The core install itself is built and tested in a fresh Python 3.12 venv by `make
test-core`; here pip only resolves, against this venv and the package index.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "safetensors", "streamlit", "vllm", "megatron-core")


def test_core_dependencies_are_light_and_extras_give_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {Requirement(r).name.lower() for r in project["dependencies"]}
    assert not core & set(HEAVY), core
    extras = project["optional-dependencies"]
    for extra in ("train", "dashboard", "vllm", "megatron", "dev", "bench"):
        assert extra in extras, extra
    pinned = [r for r in extras["train"] + extras["vllm"] + extras["megatron"] if "==" in r]
    assert not pinned, f"an exact pin would replace a user's torch stack: {pinned}"


def test_train_extra_keeps_the_torch_already_installed(tmp_path):
    """This venv has torch 2.13.0 (the CPU wheel) while the index offers newer and CUDA
    builds: resolving `.[train]` must install the project and nothing else."""
    torch = pytest.importorskip("torch")
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "-q"]
    out = subprocess.run(
        [*pip, "--report", str(report), f"{ROOT}[train]"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    would_install = {item["metadata"]["name"] for item in json.loads(report.read_text())["install"]}
    assert would_install == {"minirl"}, (torch.__version__, would_install)
