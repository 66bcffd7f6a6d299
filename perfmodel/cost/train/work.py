"""The work lists a layer produces for one GPU and one micro-batch: GEMMs, fused kernels, collectives.

`layers.py` and `attention.py` build them; `stage.py` times them. Units: FLOPs, bytes, tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from perfmodel.cost.dispatch import Dispatch
from perfmodel.cost.dtypes import dtype_bytes

ACT_BYTES = dtype_bytes("bf16")  # BF16 activations (Megatron params_dtype / TE activation dtype)
FP32_BYTES = dtype_bytes("fp32")
ATTN_BWD_FACTOR = 2.5  # flash attention backward / forward (FlashAttention-2 section 3.1.2)
INDEXER_BWD_FACTOR = 2.0  # assumption: indexer scores backward = dQ and dK GEMMs, 2x the forward score GEMM
# assumption: an elementwise kernel's backward reads the saved input and the output grad, writes the input grad
MEM_BWD_FACTOR = 2.0
# Vocab-parallel cross-entropy (Megatron core/tensor_parallel/cross_entropy.py, unfused): logits cast to FP32
# (read 2 + write 4), max-subtract (read 4 + write 4), exp (read 4 + write 4), sum (read 4) = 26 B per logit
# forward; backward softmax - one-hot in place (read 4 + write 4) and cast to BF16 (read 4 + write 2) = 14 B.
CE_FWD_BYTES_PER_LOGIT = 26.0
CE_BWD_BYTES_PER_LOGIT = 14.0

# Megatron-core's recompute submodules (TransformerConfig.recompute_modules, megatron/core/transformer/
# transformer_config.py): a work item carries the path of the submodules it runs in, "moe/moe_act" for the expert
# activation inside the MoE layer, and selective recompute replays the items under any module it names.
CORE_ATTN = "core_attn"
MLA_UP_PROJ = "mla_up_proj"
LAYERNORM = "layernorm"
MLP = "mlp"
MOE = "moe"
MOE_ACT = "moe_act"
SHARED_EXPERTS = "shared_experts"


def replayed(module: str, recomputed: frozenset[str]) -> bool:
    """A work item in submodule path `module` runs again in the backward when any submodule on its path is
    recomputed."""
    return bool(module) and any(part in recomputed for part in module.split("/"))


CommKind = Literal["tp", "cp", "ep_a2a", "etp"]
Op = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]


@dataclass(frozen=True, slots=True)
class Shard:
    """How one GPU sees a micro-batch."""

    tokens: float  # tokens of the micro-batch over all CP ranks (micro_batch x seq_len for fixed batching)
    seq_len: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    precision: str = "bf16"  # GEMM dtype of the transformer-layer linears
    moe_dispatcher: str = "alltoall"  # MoE dispatch kernels (inputs/job.py MoEDispatcher, cost/dispatch.py)
    attention_kernel: str = "flash"  # "flash" (fused) or "materialized" (scores and softmax through HBM)
    fp8_recipe: str = "delayed"  # how FP8 GEMM inputs are quantized (layers.py fp8_cast_work); unused in BF16
    elementwise_fusion: str = "fused"  # "fused" kernels or "eager" ATen chains (eager.py)
    flops_convention: str = "mbridge-25.11"  # how model FLOPs are counted (flops.py): not a cost, a reported figure
    grouped_gemm_launch: str = "single"  # MoE expert GEMMs: one grouped kernel, or "multi_stream" (one per expert)

    @property
    def t_cp(self) -> float:
        """Rows of the TP-split GEMMs: every token of this CP rank."""
        return self.tokens / self.cp

    @property
    def t_sp(self) -> float:
        """Rows of norms, residuals and elementwise work (split over TP under sequence parallel)."""
        return self.t_cp / self.tp if self.sequence_parallel else self.t_cp

    @property
    def t_moe(self) -> float:
        """Tokens this GPU routes into an MoE layer (sequence-parallel split whenever tp > 1)."""
        return self.t_cp / self.tp

    @property
    def sequences(self) -> float:
        return self.tokens / self.seq_len


@dataclass(frozen=True, slots=True)
class Gemm:
    name: str
    m: float
    n: float
    k: float
    batch: int = 1
    dtype: str = "bf16"
    core_attention: bool = False  # QK^T or PV of a materialized attention: both operands are activations (both
    # gradients are input gradients, B), and selective recompute replays it
    grouped: bool = False  # one grouped GEMM over `batch` experts sharing m x batch rows (cost/compute.py)
    module: str = ""  # the Megatron submodule path it runs in (the names above; "" outside any)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True, slots=True)
class Kernel:
    """A fused kernel timed on a roofline: attention cores ("attn") or memory-bound work ("mem"). Forward and
    backward amounts are explicit (a backward-only kernel has zero forward work)."""

    name: str
    kind: Literal["attn", "mem"]
    flops: float
    hbm_bytes: float
    bwd_flops: float
    bwd_hbm_bytes: float
    dtype: str = "bf16"
    kernels: int = 1  # launches per pass (memory-bound kernels pay a fixed cost each)
    bwd_weight: bool = False  # its backward is a weight gradient (embedding scatter-add): W, not B
    query_heads: float = 0.0  # an attention core's query rows x heads (each pays a fixed time in the forward)
    scores: float = 0.0  # an attention core's softmax scores, query-key pairs x heads (one exponential each)
    sparse: bool = False  # DeepSeek-V4's sparse-MLA core (the profile's sparse_mla efficiencies)
    module: str = ""


@dataclass(frozen=True, slots=True)
class CommOp:
    kind: CommKind
    op: Op
    nbytes: float
    phase: Literal["fwd", "bwd"]
    overlaps_attention: bool = False  # CP ring exchange runs under the attention kernel (TE ring attention)
    overlaps_dgrad: bool = False  # runs under the input-gradient GEMMs (Megatron's async SP all-gather)
    dispatch: Dispatch | None = None  # an MoE dispatch or combine, priced by cost/dispatch.py
    module: str = ""


@dataclass(frozen=True, slots=True)
class Work:
    gemms: tuple[Gemm, ...] = ()
    kernels: tuple[Kernel, ...] = ()
    comms: tuple[CommOp, ...] = ()
    model_flops_fwd: float = 0.0  # Megatron-Bridge model FLOPs of this work, forward, on this GPU

    def __add__(self, other: Work) -> Work:
        return Work(self.gemms + other.gemms, self.kernels + other.kernels, self.comms + other.comms,
                    self.model_flops_fwd + other.model_flops_fwd)

    @property
    def hardware_flops_fwd(self) -> float:
        return sum(g.flops for g in self.gemms) + sum(k.flops for k in self.kernels)


@dataclass
class Builder:
    gemms: list[Gemm] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    comms: list[CommOp] = field(default_factory=list)
    module: str = ""  # the submodule path the next items run in (`within`)

    @contextmanager
    def within(self, name: str) -> Iterator[None]:
        """Items added inside run in submodule `name`, nested in the current one ("moe/moe_act")."""
        outer = self.module
        self.module = f"{outer}/{name}" if outer else name
        try:
            yield
        finally:
            self.module = outer

    def gemm(self, name: str, m: float, n: float, k: float, batch: int = 1, dtype: str = "bf16",
             core: bool = False, grouped: bool = False) -> None:
        if m > 0 and n > 0 and k > 0 and batch > 0:
            module = CORE_ATTN if core else self.module
            self.gemms.append(Gemm(name, m, n, k, batch, dtype, core, grouped, module))

    def mem(self, name: str, nbytes: float, flops: float = 0.0, kernels: int = 1,
            bwd_factor: float = MEM_BWD_FACTOR, bwd_bytes: float | None = None, bwd_weight: bool = False) -> None:
        bb = bwd_factor * nbytes if bwd_bytes is None else bwd_bytes
        self.kernels.append(Kernel(name, "mem", flops, nbytes, bwd_factor * flops, bb, kernels=kernels,
                                   bwd_weight=bwd_weight, module=self.module))

    def attn(self, name: str, flops: float, nbytes: float, dtype: str = "bf16", bwd_factor: float = ATTN_BWD_FACTOR,
             core: bool = True, query_heads: float = 0.0, scores: float = 0.0, sparse: bool = False) -> None:
        self.kernels.append(Kernel(name, "attn", flops, nbytes, bwd_factor * flops, bwd_factor * nbytes, dtype, 1,
                                   query_heads=query_heads, scores=scores, sparse=sparse,
                                   module=CORE_ATTN if core else self.module))

    def comm(self, kind: CommKind, op: Op, nbytes: float, phase: Literal["fwd", "bwd"], overlap: bool = False,
             under_dgrad: bool = False) -> None:
        if nbytes > 0:
            self.comms.append(CommOp(kind, op, nbytes, phase, overlap, under_dgrad, module=self.module))

    def dispatch(self, d: Dispatch, phase: Literal["fwd", "bwd"]) -> None:
        """An EP all-to-all (dispatch or combine) of this GPU's routed tokens."""
        if d.send_bytes > 0:
            self.comms.append(CommOp("ep_a2a", "all_to_all", d.send_bytes, phase, dispatch=d, module=self.module))

    def build(self, model_flops_fwd: float = 0.0) -> Work:
        return Work(tuple(self.gemms), tuple(self.kernels), tuple(self.comms), model_flops_fwd)


# ---------------------------------------------------------------------------------------------------------------
# Collectives shared by attention and MLP blocks


def tp_block(b: Builder, s: Shard, hidden: int, gather_bytes_per_token: float | None = None) -> None:
    """Megatron: with sequence parallel, all-gather the block input and reduce-scatter its output (backward:
    the mirror pair, plus the all-gather of the block input again: the column-parallel linear keeps only its
    sequence shard and re-gathers the input for its weight gradient, launched asynchronously under the
    input-gradient GEMM; Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.2; megatron-core
    tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication.backward); without it,
    all-reduce the output forward and the input gradient backward."""
    if s.tp <= 1:
        return
    out = s.t_cp * hidden * ACT_BYTES
    if s.sequence_parallel:
        gin = s.t_cp * (gather_bytes_per_token if gather_bytes_per_token is not None else hidden * ACT_BYTES)
        b.comm("tp", "all_gather", gin, "fwd")
        b.comm("tp", "reduce_scatter", out, "fwd")
        b.comm("tp", "reduce_scatter", gin, "bwd")
        b.comm("tp", "all_gather", out, "bwd")
        b.comm("tp", "all_gather", gin, "bwd", under_dgrad=True)
    else:
        b.comm("tp", "all_reduce", out, "fwd")
        b.comm("tp", "all_reduce", out, "bwd")


def cp_exchange(b: Builder, s: Shard, kv_bytes_full: float) -> None:
    """Context parallel: every rank needs the K/V of the whole sequence: an all-gather forward, and backward
    the K/V again plus a reduce-scatter of dK/dV (TE ring attention runs it under the attention kernel)."""
    if s.cp <= 1 or kv_bytes_full <= 0:
        return
    b.comm("cp", "all_gather", kv_bytes_full, "fwd", overlap=True)
    b.comm("cp", "all_gather", kv_bytes_full, "bwd", overlap=True)
    b.comm("cp", "reduce_scatter", kv_bytes_full, "bwd", overlap=True)
