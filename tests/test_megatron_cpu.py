"""The CPU patches of megatron-core (trainer/engines/megatron/cpu.py), one by one, and
that no other file of the project touches megatron."""

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("megatron.core")
if torch.cuda.is_available():
    pytest.skip("the patches install nothing where CUDA is available", allow_module_level=True)

from trainer.engines.megatron import cpu as megatron_cpu
from trainer.engines.megatron.training import megatron_world

REPO = Path(__file__).resolve().parents[1]


def test_apply_installs_each_patch_once():
    names = megatron_cpu.apply()
    assert names == megatron_cpu.apply()  # idempotent
    assert set(names) == {
        "Router.gating",
        "RotaryEmbedding.get_emb",
        "DotProductAttention.forward",
        "CudaRNGStatesTracker.fork",
        "mappings._gather_along_first_dim",
        "mappings._reduce_scatter_along_first_dim",
        "moe_utils.te_general_gemm",
    }
    from megatron.core.transformer.moe import moe_utils

    assert moe_utils.te_general_gemm is None


def test_cpu_is_current_device_is_scoped():
    original = torch.cuda.current_device
    with pytest.raises(KeyError), megatron_cpu.cpu_is_current_device():
        assert torch.cuda.current_device() == torch.device("cpu")
        raise KeyError
    assert torch.cuda.current_device is original


def test_router_gating_and_rope_stay_on_cpu():
    """Unpatched, both move their tensor to torch.cuda.current_device(): an error here."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.transformer.moe.router import TopKRouter

    from trainer.engines.megatron.convert import transformer_config
    from trainer.models import ModelConfig

    megatron_cpu.apply()
    hf = ModelConfig().hf_config(vocab_size=99, pad_id=0, bos_id=1, eos_id=2)
    from megatron.core.process_groups_config import ProcessGroupCollection

    with megatron_world():
        groups = ProcessGroupCollection.use_mpu_process_groups()
        router = TopKRouter(config=transformer_config(hf, on_cpu=True), pg_collection=groups)
    torch.nn.init.normal_(router.weight)
    x = torch.randn(5, 3, hf.hidden_size)
    logits = router.gating(x)
    assert router.weight.device.type == "cpu" and logits.shape == (5, 3, hf.num_experts)
    torch.testing.assert_close(logits, x @ router.weight.T)

    rope = RotaryEmbedding(kv_channels=32, rotary_percent=1.0, use_cpu_initialization=True)
    emb = rope.get_emb(7)
    inv = 1.0 / 10000 ** (torch.arange(0, 32, 2).float() / 32)
    freqs = torch.outer(torch.arange(7).float(), inv)
    assert emb.device.type == "cpu" and emb.shape == (7, 1, 1, 32)
    torch.testing.assert_close(emb[:, 0, 0], torch.cat([freqs, freqs], -1))


def test_rng_fork_is_a_no_op_without_cuda():
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker

    megatron_cpu.apply()
    state = torch.get_rng_state()
    with CudaRNGStatesTracker().fork():
        pass
    assert torch.equal(state, torch.get_rng_state())


def test_refuses_an_unchecked_version(monkeypatch):
    monkeypatch.setattr(megatron_cpu, "_applied", [])
    monkeypatch.setattr(megatron_cpu, "megatron_version", lambda: "0.99.0")
    with pytest.raises(RuntimeError, match=r"checked with 0\.16\.1"):
        megatron_cpu.apply()


def test_only_the_megatron_engine_files_touch_megatron():
    allowed = {
        "training.py",
        "convert.py",
        "cpu.py",
        "parallel.py",
        "routing.py",
    }
    pattern = re.compile(r"^\s*(from|import) megatron\b", re.M)
    users = {
        path.relative_to(REPO).as_posix()
        for top in ("trainer", "minirl", "monitor", "dashboard", "app", "bench")
        for path in (REPO / top).rglob("*.py")
        if pattern.search(path.read_text(encoding="utf-8"))
    }
    assert users == {f"trainer/engines/megatron/{name}" for name in allowed}
