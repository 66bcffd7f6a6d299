"""Everything megatron-core 0.16.1 and SGLang 0.5.23 need to run on a machine without CUDA, in one place.

Applied only when `torch.cuda.is_available()` is False; on a GPU machine every function here is a no-op.
Nothing is installed or registered under another project's name except `flash_mla`, which is marked as
*unavailable* (the same state as when it is not installed). Each shim says which library line it covers.

Megatron side (`apply_megatron_shims`, call before importing megatron.core):
  1. `flash_mla` (brought by SGLang) raises OSError, not ImportError, without libcuda; megatron's
     `transformer/attention.py` only catches ImportError. We set `sys.modules["flash_mla"] = None`, which
     makes `import flash_mla` raise ImportError.
  2. `torch.cuda.current_device()` is used as a device for buffers, rotary tables, p2p shapes, also in
     autograd backward functions where shim 3 is not active: it returns `torch.device("cpu")`.
     `torch.cuda.synchronize` (pipeline p2p) becomes a no-op.
  3. A TorchFunctionMode maps every `device="cuda"` / `device=<int>` of a tensor factory, `.to(...)` and
     `.cuda()` to the CPU (optimizer, clip_grads, DDP buffers, schedules create tensors on 'cuda').
     `Tensor.type()` reports `torch.cuda.*Tensor`, the strings the mixed-precision optimizer checks.
  4. The model-parallel RNG tracker keeps CUDA RNG states: `add` and `fork` use CPU generator states.
  5. The MoE all-to-all dispatcher creates a CUDA stream for D2H copies and keeps split sizes as torch
     tensors, which `all_to_all_single` rejects on gloo: no stream, split sizes become numpy arrays.
  6. `moe_utils.te_general_gemm` is referenced although TransformerEngine is absent: defined as None.

SGLang side (the scheduler subprocess entry `run_scheduler_process_on_cpu`, which engine_processes.py's CpuEngine
runs; engine_processes.py also forks the engine's processes from a prestarted forkserver on CPU):
  7. Rotary embedding: a non-CUDA, non-"CPU engine" platform imports a kernel from `vllm._custom_ops`,
     which is not installed; we make it take its own `forward_native` torch implementation.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_APPLIED: set[str] = set()


def needs_cpu_shims() -> bool:
    return not torch.cuda.is_available()


# ---------------------------------------------------------------------------------------------- megatron


def _is_cuda_device(device: Any) -> bool:
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return False


_CPU_TYPE_TO_CUDA = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
}


class CudaDeviceToCpu(TorchFunctionMode):
    """Shim 3: tensors megatron asks for on 'cuda' are made on the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return _CPU_TYPE_TO_CUDA.get(name, name)
        if "device" in kwargs and _is_cuda_device(kwargs["device"]):
            kwargs["device"] = "cpu"
        if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


class _CpuRngTrackerMethods:
    """Shim 4: CudaRNGStatesTracker.add / fork with CPU generator states."""

    @staticmethod
    def add(self: Any, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise Exception(f"seed {seed} already exists")
        self.seeds_.add(seed)
        if name in self.states_:
            raise Exception(f"cuda rng state {name} already exists")
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @staticmethod
    @contextlib.contextmanager
    def fork(self: Any, name: str = "model-parallel-rng"):  # type: ignore[no-untyped-def]
        if name not in self.states_:
            raise Exception(f"cuda rng state {name} is not added")
        orig = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(orig)


def _moe_dtoh_on_cpu(self: Any, point: str, tokens_per_expert: torch.Tensor | None = None) -> torch.Tensor | None:
    """Shim 5: replaces MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize."""
    if not self.drop_and_pad and point == self.cuda_dtoh_point:
        for attr in ("input_splits", "output_splits", "output_splits_tp"):
            value = getattr(self, attr, None)
            if isinstance(value, torch.Tensor):
                setattr(self, attr, value.detach().cpu().numpy())
    return tokens_per_expert


def apply_megatron_shims() -> None:
    """Apply shims 1-6. Call before the first `import megatron.core`; idempotent; no-op with a GPU."""
    if not needs_cpu_shims() or "megatron" in _APPLIED:
        return
    _APPLIED.add("megatron")
    sys.modules.setdefault("flash_mla", None)  # type: ignore[arg-type]  # shim 1
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment]  # shim 2
    torch.cuda.synchronize = lambda device=None: None  # type: ignore[assignment]
    CudaDeviceToCpu().__enter__()  # shim 3: stays on for the life of the trainer process

    from megatron.core.tensor_parallel import random as mp_random

    mp_random.CudaRNGStatesTracker.add = _CpuRngTrackerMethods.add  # shim 4
    mp_random.CudaRNGStatesTracker.fork = _CpuRngTrackerMethods.fork

    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None  # shim 6
    token_dispatcher.MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = object()  # shim 5: never used
    token_dispatcher.MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize = _moe_dtoh_on_cpu


# ---------------------------------------------------------------------------------------------- sglang


def apply_sglang_shims() -> None:
    """Shim 7, in the process that builds the model (SGLang's scheduler subprocess)."""
    if not needs_cpu_shims() or "sglang" in _APPLIED:
        return
    _APPLIED.add("sglang")
    from sglang.srt.layers.rotary_embedding import base as rope_base

    original_init = rope_base.RotaryEmbedding.__init__

    def init_with_native_forward(self: Any, *args: Any, **kwargs: Any) -> None:
        saved = rope_base._is_mps
        rope_base._is_mps = True  # only to skip the vllm kernel import inside __init__
        try:
            original_init(self, *args, **kwargs)
        finally:
            rope_base._is_mps = saved
        self.use_fallback_kernel = False
        self._forward_method = self.forward_native

    rope_base.RotaryEmbedding.__init__ = init_with_native_forward


def run_scheduler_process_on_cpu(*args: Any, **kwargs: Any) -> Any:
    """SGLang scheduler subprocess entry: apply shim 7, then run SGLang's own entry."""
    apply_sglang_shims()
    from sglang.srt.managers.scheduler import run_scheduler_process

    return run_scheduler_process(*args, **kwargs)
