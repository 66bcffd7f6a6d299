"""perfmodel: a discrete-event performance model of RL training of large MoE models.

Data flows one way: spec (validated inputs) -> cost (pure functions) -> sim (simpy) -> sweep / report.
"""

__version__ = "0.1.0"
