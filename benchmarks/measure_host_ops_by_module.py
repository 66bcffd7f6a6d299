"""Count the PyTorch (aten) operations megatron-core 0.16.1 issues per decoder layer forward, by the part a CUDA
graph scope captures: the attention block (`attn`: input norm, self-attention, its bias-dropout-add), the dense MLP
block (`mlp`: pre-MLP norm, MLP, its bias-dropout-add), an MoE layer's router (`moe_router`: pre-MLP norm and router,
megatron-core TransformerLayer._get_submodules_under_cudagraphs) and its token dispatcher's preprocess
(`moe_preprocess`), and the rest of the MoE block (dispatch, experts, combine, postprocess).

Counts only (no timing: deterministic). Writes benchmarks/results/host-ops-by-module.json, which
perfmodel/cost/train/cuda_graphs.py cites. The local layer spec runs experts one by one: the expert part is measured
at 2 and 4 experts and brought to one grouped GEMM per fc1 / activation / fc2, as measure_host_ops.py does.
"""

from __future__ import annotations

import collections
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from measure_host_ops import _model, init_one_process
from torch.utils._python_dispatch import TorchDispatchMode

MOE_METHODS = ("route", "preprocess", "dispatch", "routed_experts_compute", "combine", "postprocess")


class LabelledCounter(TorchDispatchMode):
    """Counts each aten op under the innermost label pushed by `labelled`."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self.stack[-1] if self.stack else "outside"] += 1
        return func(*args, **(kwargs or {}))

    def labelled(self, name: str, fn):
        @functools.wraps(fn)
        def wrapped(*a, **k):
            self.stack.append(name)
            try:
                return fn(*a, **k)
            finally:
                self.stack.pop()
        return wrapped


def _layer_ops(experts: int) -> dict[str, int]:
    model = _model(1, experts)
    counter = LabelledCounter()
    layer = model.decoder.layers[0]
    layer.forward = counter.labelled("layer_bda", layer.forward)  # what the layer runs outside its submodules
    for name in ("input_layernorm", "self_attention", "pre_mlp_layernorm", "mlp"):
        module = getattr(layer, name)
        module.forward = counter.labelled(name, module.forward)
    if experts:
        for meth in MOE_METHODS:
            setattr(layer.mlp, meth, counter.labelled("moe." + meth, getattr(layer.mlp, meth)))
    ids, pos = torch.randint(0, 64, (1, 32)), torch.arange(32).unsqueeze(0)
    model(ids, pos, None).float().sum().backward()  # warm-up
    with counter:
        model(ids, pos, None)
    return {k: v for k, v in counter.ops.items() if k != "outside"}


def main() -> None:
    import torch.distributed as dist

    init_one_process("29521")
    dense, moe2, moe4 = _layer_ops(0), _layer_ops(2), _layer_ops(4)
    per_expert = (moe4["moe.routed_experts_compute"] - moe2["moe.routed_experts_compute"]) / 2
    experts_grouped = moe2["moe.routed_experts_compute"] - 2 * per_expert + 3  # fc1, activation, fc2 grouped
    bda = dense["layer_bda"] / 2  # two bias-dropout-adds per layer, one after each block
    attn = dense["input_layernorm"] + dense["self_attention"] + bda
    parts = {
        "dense": {"attn": attn, "mlp": dense["pre_mlp_layernorm"] + dense["mlp"] + bda},
        "moe": {"attn": attn, "moe_router": moe2["pre_mlp_layernorm"] + moe2["moe.route"],
                "moe_preprocess": moe2["moe.preprocess"],
                "moe_rest": (moe2["moe.dispatch"] + experts_grouped + moe2["moe.combine"] + moe2["moe.postprocess"]
                             + bda)},
    }
    out = {"torch": torch.__version__, "note": __doc__.split("\n\n")[0], "raw_fwd_ops": {"dense": dense,
           "moe_2_experts": moe2, "moe_4_experts": moe4}, "fwd_ops_by_scope_part": parts,
           "layer_fwd_ops": {k: sum(v.values()) for k, v in parts.items()}}
    path = Path(__file__).parent / "results" / "host-ops-by-module.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
