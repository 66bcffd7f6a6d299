"""What a Miles launch adds beyond the plan: per-model arguments and per-vendor runtime environment.

Sources (radixark/miles):
- [PR1300] `refs/pull/1300/head` commit a8684732f, `scripts/amd/run_deepseek_v4.py`: the async/disaggregated AMD
  DeepSeek-V4 launcher whose CLI matches the MI355X launch command of the LMSYS blog of 2026-07-10
  ("Bringing DeepSeek-V4 Flash RL Training to AMD Instinct MI355X GPUs with Miles").
- [CMD] `miles/utils/external_utils/command_utils.py::execute_train` (same commit and HEAD 31f1ca961): the runtime env
  every Miles launch gets (CUDA_DEVICE_MAX_CONNECTIONS, NCCL_NVLS_ENABLE, MASTER_ADDR, no_proxy, PYTHONPATH).
- [MODELS] `scripts/models/<type>.sh` (PR #1300 era) or `scripts/models/<type>.py` (HEAD): the Megatron MODEL_ARGS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------------------------
# Runtime environment
# ---------------------------------------------------------------------------------------------------------------

# [CMD] execute_train, for Megatron training.
MILES_BASE_ENV: dict[str, str] = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "PYTHONUNBUFFERED": "1",
}

# [PR1300] _ROCM_ENV_DEFAULTS + RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES of _base_env
ROCM_ENV: dict[str, str] = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
    "USE_ROCM": "1",
    "USE_CUDA": "0",
    "ROCM_HOME": "/opt/rocm",
    "ROCM_PATH": "/opt/rocm",
    "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "1",
}

# [PR1300] _RCCL_TUNING_DEFAULTS ("tuned RCCL transport settings" of the blog)
RCCL_TUNING_ENV: dict[str, str] = {
    "NCCL_IB_TC": "160",
    "NCCL_IB_TIMEOUT": "22",
    "NCCL_IB_RETRY_CNT": "7",
    "NCCL_IB_QPS_PER_CONNECTION": "2",
    "NCCL_IB_SPLIT_DATA_ON_QPS": "0",
    "NCCL_ALGO": "Ring",
    "NCCL_PXN_DISABLE": "0",
    "NCCL_NET_GDR_LEVEL": "2",
}

# [PR1300] _MILES_ASYNC_ENV_DEFAULTS (RAY_DEDUP_LOGS=0 also keeps every perf line in the job log)
AMD_MILES_ENV: dict[str, str] = {
    "HIP_FORCE_DEV_KERNARG": "1",
    "HSA_NO_SCRATCH_RECLAIM": "1",
    "ROCM_QUICK_REDUCE_QUANTIZATION": "INT8",
    "MILES_MBRIDGE_MEMORY_EFFICIENT_LOAD": "1",
    "MILES_TE_ADAM_CHUNK_ELEMS": "8000000",
    "AITER_BF16_FP8_MOE_BOUND": "1",
    "MC_TRANSFER_TIMEOUT": "300",
    "RAY_DEDUP_LOGS": "0",
}

# [PR1300] _NCCL_DEBUG_ENV_DEFAULTS (only with options.nccl_debug)
NCCL_DEBUG_ENV: dict[str, str] = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET,COLL",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "200000",
    "TORCH_FR_BUFFER_SIZE": "200000",
    "TORCH_NCCL_DESYNC_DEBUG": "1",
}

# [PR1300] train_deterministic=True adds these (and --deterministic-mode).
DETERMINISTIC_ENV: dict[str, str] = {
    "NCCL_ALGO": "Ring",
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
    "MILES_HACK_TRAIN_TORCH_DETERMINISTIC": "1",
}

# Site-specific network variables: copied from the submitting shell when set ([PR1300] _NETWORK_ENV_NAMES,
# [CMD] NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME), never invented.
NETWORK_ENV_NAMES: tuple[str, ...] = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
)


# ---------------------------------------------------------------------------------------------------------------
# Per-model recipes
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelRecipe:
    """The Miles-side facts about one catalogue model."""

    model_type: str  # scripts/models/<model_type>.{py,sh}
    hf_name: str  # default checkpoint folder name under options.model_dir
    megatron_args: tuple[str, ...] = ()  # appended to every launch of this model
    sglang_args: tuple[str, ...] = ()  # `{ctx}` is replaced by the context length
    amd_sglang_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)  # model env for every vendor
    amd_env: dict[str, str] = field(default_factory=dict)  # extra on AMD GPUs
    qkv_format: str | None = None  # --qkv-format (bshd forbids --use-dynamic-batch-size)
    train_memory_margin_bytes: int | None = None
    fp8_train_args: tuple[str, ...] = ("--transformer-impl", "transformer_engine", "--fp8-format", "e4m3",
                                       "--fp8-recipe", "blockwise")
    fp8_train_env: dict[str, str] = field(default_factory=dict)
    router_args: tuple[str, ...] = ()
    notes: str = ""


# [PR1300] _MEGATRON_DSV4_ENV_DEFAULTS
_DSV4_MEGATRON_ENV = {
    "MILES_DSV4_CKPT_VERSION": "2604",
    "MILES_DSV4_2604_SUBMODE": "2604B",
    "MEGATRON_USE_KV_QAT": "1",
}

# [PR1300] _SGLANG_DSV4_PERF_ENV_DEFAULTS (ROCm kernels for DSV4 rollout)
_DSV4_SGLANG_ROCM_ENV = {
    "SGLANG_APPLY_CONFIG_BACKUP": "none",
    "SGLANG_SKIP_CHECKPOINT_LOAD_CHECK": "1",
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
    "SGLANG_ENABLE_THINKING": "1",
    "SGLANG_USE_AITER": "1",
    "SGLANG_USE_ROCM700A": "1",
    "SGLANG_MOE_PADDING": "1",
    "SGLANG_SET_CPU_AFFINITY": "0",
    "SGLANG_ROCM_FUSED_DECODE_MLA": "1",
    "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH": "1",
    "SGLANG_FORCE_TRITON_MOE_FP8": "1",
    "SGLANG_OPT_USE_TILELANG_SWA_PREPARE": "false",
    "SGLANG_OPT_USE_JIT_KERNEL_FUSED_TOPK": "false",
    "SGLANG_OPT_DEEPGEMM_HC_PRENORM": "false",
    "SGLANG_OPT_USE_TILELANG_MHC_PRE": "false",
    "SGLANG_OPT_USE_TILELANG_MHC_POST": "false",
    "SGLANG_OPT_USE_AITER_MHC_PRE": "true",
    "SGLANG_OPT_USE_AITER_MHC_POST": "true",
    "SGLANG_OPT_USE_TRITON_SWA_PREPARE": "true",
    "SGLANG_OPT_USE_FUSED_HASH_TOPK": "true",
    "SGLANG_OPT_DPSK_V4_RADIX": "1",
    "SGLANG_OPT_USE_OLD_COMPRESSOR": "false",
    "SGLANG_OPT_USE_FUSED_COMPRESS": "true",
    "SGLANG_OPT_USE_FUSED_PAGED_COMPRESS": "true",
    "SGLANG_OPT_USE_OVERLAP_STORE_CACHE": "false",
    "SGLANG_OPT_USE_FUSED_STORE_CACHE": "true",
    "SGLANG_OPT_FUSE_WQA_WKV": "true",
    "SGLANG_TOPK_TRANSFORM_512_TORCH": "0",
    "SGLANG_OPT_USE_TILELANG_INDEXER": "true",
    "SGLANG_HACK_FLASHMLA_BACKEND": "triton",
    "SGLANG_REASONING_EFFORT": "max",
}

_DSV4_FLASH = ModelRecipe(
    model_type="deepseek-v4-flash",
    hf_name="DeepSeek-V4-Flash-FP8",  # sgl-project/DeepSeek-V4-Flash-FP8: FP8 source checkpoint, serves FP8 rollout
    # [PR1300] misc_args / perf_args that are model facts, not layout
    megatron_args=(
        "--attention-dropout", "0.0",
        "--hidden-dropout", "0.0",
        "--attention-softmax-in-fp32",
        "--grad-reduce-in-bf16",
        "--accumulate-allreduce-grads-in-fp32",
        "--model-name", "deepseekv4",
        "--moe-router-freeze-gate",
        "--freeze-e-score-correction-bias",
        "--rollout-health-check-interval", "300",
        "--rollout-health-check-timeout", "300",
    ),
    # [PR1300] sglang_args (engine size, DP/EP, mem fraction, running requests, total tokens come from the plan)
    sglang_args=(
        "--sglang-attention-backend", "compressed",
        "--sglang-page-size", "256",
        "--sglang-chunked-prefill-size", "{ctx}",
        "--sglang-server-concurrency", "1024",
        "--sglang-context-length", "{ctx}",
        "--sglang-disable-radix-cache",
        "--sglang-disable-custom-all-reduce",
        "--sglang-disable-shared-experts-fusion",
        "--sglang-schedule-conservativeness", "1.0",
        "--sglang-tool-call-parser", "deepseekv4",
        "--sglang-reasoning-parser", "deepseek-v4",
    ),
    amd_sglang_args=("--sglang-moe-runner-backend", "triton"),
    router_args=(
        "--router-health-success-threshold", "1",
        "--router-health-check-interval-secs", "15",
        "--router-health-failure-threshold", "40",
    ),
    env=dict(_DSV4_MEGATRON_ENV),
    amd_env=dict(_DSV4_SGLANG_ROCM_ENV),
    qkv_format="bshd",
    train_memory_margin_bytes=16 * 1024**3,  # [PR1300] train_memory_margin_bytes default
    # [PR1300] fp8_training: NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1
    fp8_train_env={"NVTE_FP8_BLOCK_SCALING_FP32_SCALES": "1"},
    notes="DeepSeek-V4-Flash (43 layers, 256 experts); arguments of the PR #1300 AMD async launcher",
)

# Catalogue id -> recipe. Models without a Miles DSV4-style recipe get the plain Miles arguments and their
# scripts/models name; anything else needs executor.options.model_type.
RECIPES: dict[str, ModelRecipe] = {
    "deepseek-v4-flash": _DSV4_FLASH,
    "deepseek-v3": ModelRecipe(model_type="deepseek-v3", hf_name="DeepSeek-V3"),
    "qwen3-235b-a22b": ModelRecipe(model_type="qwen3-235B-A22B", hf_name="Qwen3-235B-A22B"),
    "qwen3-30b-a3b": ModelRecipe(model_type="qwen3-30B-A3B", hf_name="Qwen3-30B-A3B"),
    "llama3-8b": ModelRecipe(model_type="llama3.1-8B-Instruct", hf_name="Llama-3.1-8B-Instruct"),
}


def recipe_for(model_id: str | None, model_type: str | None) -> ModelRecipe | None:
    """The recipe of a catalogue id; an explicit model_type overrides the scripts/models name."""
    base = RECIPES.get(model_id or "")
    if model_type is None:
        return base
    if base is None:
        return ModelRecipe(model_type=model_type, hf_name=model_type)
    return ModelRecipe(**{**{f: getattr(base, f) for f in base.__dataclass_fields__}, "model_type": model_type})
