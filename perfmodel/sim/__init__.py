"""Discrete-event simulators (simpy): pipeline schedules, training step, rollout, weight sync, RL step."""
