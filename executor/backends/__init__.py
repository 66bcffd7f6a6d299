"""Executor backends: `local` (this machine, real SGLang + megatron-core)."""
