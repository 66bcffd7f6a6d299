"""The local backend: a real GRPO loop on this machine (worker.py: one torchrun rank; rl_step.py: one step)."""
