"""Cost model (issue #3): pure functions from hardware, model and layout to kernel, layer and stage costs.

- compute:   GEMM / attention / memory-bound kernel times on a roofline
- flops:     model FLOPs per token (the Megatron-Bridge MFU convention)
- work:      the work-list types (Shard, Gemm, Kernel, CommOp, Work) and the TP/CP collectives of a block
- attention: GQA/MHA, MLA and DeepSeek-V4 hybrid attention work
- layers:    FFN/MoE, mHC, whole layers, embedding, LM head, MTP: forward work of one micro-batch on one GPU
- comm:      collectives with busbw conventions and rank placement
- moe:       expert-load imbalance (learned and hash routing), EP dispatch volumes
- params:    parameters per GPU after sharding
- stage:     the simulator's interface (ChunkCost, chunk_cost, p2p_time_s, dp_grad_sync_s, optimizer_step_s)
"""

from perfmodel.cost.train.flops import model_flops_per_token
from perfmodel.cost.train.stage import ChunkCost, chunk_cost, dp_grad_sync_s, optimizer_step_s, p2p_time_s

__all__ = ["ChunkCost", "chunk_cost", "dp_grad_sync_s", "model_flops_per_token", "optimizer_step_s", "p2p_time_s"]
