"""Count the PyTorch (aten) operations that megatron-core 0.16.1 issues per decoder layer, forward and backward,
for a dense layer and an MoE layer (alltoall token dispatcher), and time them on this host with tiny tensors.

Each aten op is at least one kernel launch on a GPU, issued by the host; where the host cannot run ahead of the
GPU (the MoE dispatcher copies token counts to the host every layer), the host's time per layer is a floor under
the layer's time. Writes benchmarks/results/host-ops.json, which perfmodel/cost/train/moe.py cites.

The local layer spec runs its experts one by one (no grouped GEMM on CPU); the per-expert ops are measured as the
slope between 2 and 4 experts and removed, leaving a grouped-GEMM layer's count (one launch per grouped GEMM).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _model(num_layers: int, experts: int):
    from executor.backends.local.tiny_model import TinyArch, build_gpt_model, transformer_config

    cfg = {"architectures": ["MixtralForCausalLM" if experts else "LlamaForCausalLM"], "vocab_size": 64,
           "hidden_size": 64, "num_hidden_layers": num_layers, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128, "max_position_embeddings": 64, "tie_word_embeddings": False}
    if experts:
        cfg |= {"num_local_experts": experts, "num_experts_per_tok": 2}
    arch = TinyArch.from_hf_config(cfg)
    config = transformer_config(arch, pp=1, ep=1, dtype=torch.float32)
    return build_gpt_model(arch, config, True, True)


def _ops(num_layers: int, experts: int, tokens: int = 32) -> tuple[int, int, float, float]:
    model = _model(num_layers, experts)
    ids = torch.randint(0, 64, (1, tokens))
    pos = torch.arange(tokens).unsqueeze(0)
    model(ids, pos, None).float().sum().backward()  # warm-up
    model.zero_grad(set_to_none=True)
    with OpCounter() as fwd:
        out = model(ids, pos, None).float().sum()
    with OpCounter() as bwd:
        out.backward()
    t_fwd, t_bwd = [], []
    for _ in range(20):  # timed without the counter (its Python hook would inflate the per-op time)
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        out = model(ids, pos, None).float().sum()
        t1 = time.perf_counter()
        out.backward()
        t2 = time.perf_counter()
        t_fwd.append(t1 - t0)
        t_bwd.append(t2 - t1)
    return fwd.count, bwd.count, sorted(t_fwd)[10], sorted(t_bwd)[10]


def init_one_process(port: str) -> None:
    """megatron-core on this CPU as one rank (gloo, TP = PP = 1), one thread: what the counts are measured in."""
    from executor.backends.local.cpu_shims import apply_megatron_shims

    apply_megatron_shims()
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    ps.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(0)
    torch.set_num_threads(1)


def main() -> None:
    import torch.distributed as dist

    init_one_process("29517")

    out: dict[str, object] = {"torch": torch.__version__, "measured_at": time.strftime("%Y-%m-%d"),
                              "note": __doc__.split("\n\n")[0]}
    per_layer = {}
    for name, experts in (("dense", 0), ("moe_2_experts", 2), ("moe_4_experts", 4)):
        f1, b1, tf1, tb1 = _ops(1, experts)
        f2, b2, tf2, tb2 = _ops(2, experts)
        per_layer[name] = {"fwd_ops": f2 - f1, "bwd_ops": b2 - b1, "fwd_s": tf2 - tf1, "bwd_s": tb2 - tb1}
    slope_f = (per_layer["moe_4_experts"]["fwd_ops"] - per_layer["moe_2_experts"]["fwd_ops"]) / 2
    slope_b = (per_layer["moe_4_experts"]["bwd_ops"] - per_layer["moe_2_experts"]["bwd_ops"]) / 2
    grouped = {"fwd_ops": per_layer["moe_2_experts"]["fwd_ops"] - 2 * slope_f + 3,  # fc1, act, fc2 grouped
               "bwd_ops": per_layer["moe_2_experts"]["bwd_ops"] - 2 * slope_b + 5}
    out["per_layer"] = per_layer
    out["per_expert_ops"] = {"fwd": slope_f, "bwd": slope_b}
    out["moe_grouped_gemm_layer"] = grouped
    total_ops = sum(v["fwd_ops"] + v["bwd_ops"] for v in per_layer.values())
    total_s = sum(v["fwd_s"] + v["bwd_s"] for v in per_layer.values())
    out["host_s_per_op"] = total_s / total_ops
    path = Path(__file__).parent / "results" / "host-ops.json"
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
