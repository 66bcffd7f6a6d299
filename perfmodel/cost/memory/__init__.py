"""Per-GPU memory: a training rank (`training`) and an SGLang rollout GPU (`rollout`)."""
