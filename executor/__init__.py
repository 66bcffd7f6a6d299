"""executor: run a perfmodel plan for real (backend local: SGLang + megatron-core GRPO) and record its timings."""
