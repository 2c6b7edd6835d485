"""Without an extra, a command that needs it says in one line what to install.

The core install (`pip install minirl`) has no torch, transformers, safetensors or
Streamlit. Each test runs the real dispatcher in a fresh interpreter where those modules
cannot be imported (`sys.modules[name] = None` makes `import name` fail exactly as an
absent package does); `make test-core` also runs this file where they are truly absent.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ("torch", "transformers", "safetensors")


def minirl(*args: str, block: tuple[str, ...], up_front: bool = True):
    """`minirl ARGS` with the `block` modules unimportable; `up_front=False` drops the
    dispatcher's check before import, leaving only the catch of the failed import."""
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({list(block)!r})); "
        "from app import cli; "
        f"{'' if up_front else 'cli.NEEDS.clear(); '}"
        f"sys.exit(cli.main({list(args)!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def assert_one_line_hint(out: subprocess.CompletedProcess, extras: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"pip install 'minirl[{extras}]'" in lines[0], lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("train", "configs/demo.yaml"),
        ("build-model", "--arch", "qwen3_moe", "--out", "never-written"),
        ("bench", "stability", "--help"),  # --help: nothing may start if the check is gone
    ],
)
def test_trainer_commands_without_torch_name_the_train_extra(args):
    out = minirl(*args, block=TRAIN)
    assert_one_line_hint(out, "train")
    assert "torch" in out.stderr
    assert not (ROOT / "never-written").exists()


def test_missing_transformers_alone_is_named():
    out = minirl("train", "configs/demo.yaml", block=("transformers",))
    assert_one_line_hint(out, "train")
    has_torch = importlib.util.find_spec("torch") is not None  # not in the core install
    assert ("needs transformers, not" if has_torch else "transformers") in out.stderr


def test_an_extras_module_failing_at_import_is_caught_too(tmp_path):
    """The real import chain of build-model reaches torch: the catch names the extra."""
    out = minirl("build-model", "--out", str(tmp_path / "m"), block=TRAIN, up_front=False)
    assert_one_line_hint(out, "train")
    assert not (tmp_path / "m").exists()


def test_dashboard_without_streamlit_names_the_dashboard_extra(tmp_path):
    out = minirl("dashboard", str(tmp_path), "--port", "1", block=("streamlit",))
    assert_one_line_hint(out, "dashboard")


def test_demo_without_both_names_both_extras():
    out = minirl("demo", "--no-dashboard", block=(*TRAIN, "streamlit"))
    assert_one_line_hint(out, "train,dashboard")


def test_core_commands_run_without_any_extra():
    out = minirl("prometheus-rules", block=(*TRAIN, "streamlit"))
    assert out.returncode == 0, out.stderr
    assert "groups:" in out.stdout
