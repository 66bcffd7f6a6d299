"""Cost model: the one room where every GPU activity is priced, as functions of hardware, model and layout.

- dtypes:   bytes per element, block-scaled FP8 overhead
- compute:  the GEMM rate (curve, dtype, shape factor), attention and memory-bound kernels on a roofline
- comm:     collectives with busbw conventions and rank placement
- dispatch: MoE expert-parallel dispatch/combine (alltoall or DeepEP-style), for training and serving
- params:   parameters per GPU after sharding (by layer, by pipeline rank, by role)
- train/:   training work lists per layer (work, attention, layers, flops, moe) and stage times (stage)
- serve/:   an SGLang engine's prefill/decode/KV costs (engine) and the trainer -> engines weight update
- memory/:  per-GPU memory of a training rank (training) and of a rollout GPU (rollout)

Nothing here keeps results between calls: callers pass a `perfmodel.memo.Memo`.
"""
