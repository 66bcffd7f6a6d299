"""Published refit timings the weight update's costs come from (cost/serve/weight_update.py): Miles' GB300 bucket
runs (the per-bucket cost and the software pipeline rate of colocated CUDA IPC), how many HF tensors an update hands
to the engines, and NeMo-RL's `nccl_reshard` table (docs/design-docs/nccl-reshard-refit.md and the PR that added it)
with the fits read off it."""

from __future__ import annotations

MIB = 2**20

# GB300 bucket measurements and the derivation of the per-bucket cost and the pipeline rate

GB300_BUCKET_RUNS: tuple[tuple[float, int, float, str], ...] = (
    (256.0, 2130, 65.0, "steady updates 63.3 / 65.4 / 66.3 / 68.0 s and 'updates 2-4 each about 65 s' "
                        "(bobboli/miles aga_dsv4_flash EXPERIMENT_LOG_2026-08-10; "
                        "docs/reference/dsv4-flash-and-miles.md 3.2)"),
    (64.0, 8537, 150.7, "steady updates 150.6 / 149.8 / 151.8 s (same log; first update 160 s left out)"),
)
GB300_REFERENCE_LINK_BYTES_PER_S = 900.0e9
"""The link of the measured colocated run: NVLink 5, 900 GB/s per GPU per direction (hwprofiles/gb300.yaml), all 32
ranks in one NVL72 domain. Used only by `scale_pipeline_by_link=True`."""


def bucket_fit(runs: tuple[tuple[float, int, float, str], ...] = GB300_BUCKET_RUNS) -> tuple[float, float]:
    """(per-bucket seconds, pipeline bytes/s) from two (bucket MiB, buckets, seconds) measurements:
    T = n c + B / R with B = n x bucket bytes (the same model bytes for both runs)."""
    (mb1, n1, t1, _), (mb2, n2, t2, _) = runs[:2]
    c = (t2 - t1) / (n2 - n1)
    b1 = n1 * mb1 * MIB
    r = b1 / (t1 - n1 * c)
    return c, r


# HF tensors a decoder layer hands to the engine's weight loader: the attention projections (q, k, v, o; MLA's
# q_a/q_b/kv_a/kv_b/o count alike) and two norms; a dense MLP's gate, up and down, or a router plus three per
# routed and shared expert (HF checkpoint naming: model.layers.N.mlp.experts.E.{gate,up,down}_proj).
ATTENTION_TENSORS, NORM_TENSORS, MLP_TENSORS = 4, 2, 3
MODEL_END_TENSORS = 3  # embedding, final norm, LM head


def layer_tensors(experts: int) -> int:
    """HF tensors of one decoder layer: a dense MLP's when `experts` is 0, else a router and each expert's
    (`experts`: routed + shared)."""
    return ATTENTION_TENSORS + NORM_TENSORS + (MLP_TENSORS * experts + 1 if experts else MLP_TENSORS)


def hf_tensors(layers: int, dense_layers: int, experts: int) -> int:
    """HF tensors of a decoder-only model counted as `_params` counts them (`experts`: routed + shared)."""
    return MODEL_END_TENSORS + dense_layers * layer_tensors(0) + (layers - dense_layers) * layer_tensors(experts)


# NeMo-RL `nccl_reshard` (docs/design-docs/nccl-reshard-refit.md, H100 table, BF16): every training rank sends its
# own shard to the engine ranks that hold that slice (no gather, no full tensor anywhere). Rows that set the
# per-tensor and fixed costs: (model, HF tensors, measured s (the middle of the published range), the link time of
# its bytes on its H100s: max(received per engine GPU, sent per training GPU) / (50 GB/s x 0.8)).
RESHARD_RUNS: tuple[tuple[str, int, float, float], ...] = (
    ("Qwen3-4B DP8 -> TP8", hf_tensors(36, 36, 0), 0.275, 8.04e9 / 8 / 40e9),  # '0.21-0.34s'
    ("Qwen3-30B-A3B EP8xPP2 -> TP8xDP2", hf_tensors(48, 0, 128), 0.87, 61.1e9 / 8 / 40e9),  # '0.74-1.00s'
)
"""Two equations, T - link = fixed + tensors x per-tensor: 23 us per HF tensor (the sources' naming and slicing)
and 0.24 s fixed (everything fixed its timer holds). Its other rows are validation cases
(studies/validation/weight-update: FP8 Qwen3-30B-A3B, DeepSeek-V3 on H100 and GB200), not inputs."""


def _reshard_fit(runs: tuple[tuple[str, int, float, float], ...] = RESHARD_RUNS) -> tuple[float, float]:
    (_, n1, t1, l1), (_, n2, t2, l2) = runs[:2]
    per_tensor = ((t2 - l2) - (t1 - l1)) / (n2 - n1)
    return (t1 - l1) - n1 * per_tensor, per_tensor


RESHARD_FIXED_S, RESHARD_TENSOR_S = _reshard_fit()

# FP8 end to end (blockwise FP8 trainer -> FP8 vLLM) costs more per update than BF16 over the same mapping: "For FP8
# models, the efficiency is currently lower" (the design doc). NeMo-RL PR #2971's H100 table (2026-06-27, the rows
# the doc copies and more) times Qwen3-30B-A3B over one mapping both ways: EP8xPP2 -> TP2xDP8 BF16 '1.21s-1.52s',
# FP8 '3.20s-4.30s'. The difference of the middles over the model's HF tensors is the FP8 path's extra time per
# tensor (the scales sent beside each weight and the engine's post-load processing of its FP8 blocks). Neither row is
# a case; the case is the doc's other FP8 row (EP8xDP2 -> TP2xDP8, 2.90-4.00 s).
RESHARD_FP8_PAIR: tuple[int, float, float] = (hf_tensors(48, 0, 128), (1.21 + 1.52) / 2, (3.20 + 4.30) / 2)
RESHARD_FP8_TENSOR_S = (RESHARD_FP8_PAIR[2] - RESHARD_FP8_PAIR[1]) / RESHARD_FP8_PAIR[0]
