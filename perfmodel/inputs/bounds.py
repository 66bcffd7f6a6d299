"""The largest values an input may hold: sizes the model prices in bounded time and memory (a sweep's candidate
count, a step's simulated requests and micro-batches, a model's layers). Each is far past any published run (the
reason beside it) and short of what would take minutes or gigabytes to price; docs/reliability.md lists them."""

from __future__ import annotations

MAX_GPUS = 2**20  # GPUs of a run (the largest published jobs: ~10^5)
MAX_PARALLEL_DEGREE = 2**16  # one TP/PP/CP/EP/ETP/VPP/DP degree, an engine's GPUs
MAX_SEQ_LEN = 2**22  # tokens per sequence (published contexts: <= 10^6)
MAX_GLOBAL_BATCH = 2**20  # sequences per optimizer step (published: <= 10^5)
MAX_MICRO_BATCH = 2**16
MAX_RESPONSES_PER_STEP = 2**18  # an RL step's prompts x samples (published: <= 10^4); each is a simulated request
MAX_MICRO_BATCHES = 2**16  # micro-batches per pipeline per step (each a simulated event per stage)
MAX_LAYERS = 1024  # decoder layers (the largest published models: ~130)
MAX_EXPERTS = 2**14  # routed experts per MoE layer (published: <= 512)
MAX_CONFIG_INT = 2**24  # any other integer of a model config (hidden size, vocabulary, heads, ...)
# candidate plans one sweep enumerates (the default 4-64 node sweep: 69,648). Sweeps stream, so this bounds time, not
# memory (benchmarks/bench_sweep_memory.py): about 3 minutes on 2 cores, and a Ctrl-C that writes every candidate's
# row within 10 s
MAX_SWEEP_CANDIDATES = 200_000
MAX_TOP_PLANS = 1000  # plans a sweep writes and prints, rows a capacity report shows (--top)
