"""Executor backends behind one interface (base.py: `Backend.launch(plan, options) -> RunOutcome`), chosen by
`plan.executor.backend` (registry.py): `local` (this machine, real SGLang + megatron-core) and `miles` (a Ray job
on a cluster)."""
