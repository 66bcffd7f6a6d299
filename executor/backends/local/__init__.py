"""The local backend: a real GRPO loop on this machine (see worker.py for one step)."""
