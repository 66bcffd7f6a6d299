"""Expert-load imbalance and EP dispatch/combine volumes: the busiest EP rank sets an MoE layer's time.

Learned routing takes a balance factor, max/mean load over EP ranks. The default 1.0 matches force-balanced
benchmarks (Megatron-Bridge MoE runs "force-balance the token distribution among experts",
docs/reference/hardware.md 3e); set it from a routing trace for real runs.

Hash-routed layers (DeepSeek-V4's first `num_hash_layers`) look their experts up in a fixed token-id ->
top_k table (`tid2eid`, shape [vocab_size, top_k]; docs/reference/dsv4-flash-and-miles.md 1.4), so their load
follows the token-frequency distribution of the batch. Token frequencies follow Zipf's law, p(rank r) ~ r^-s with s
close to 1 for natural-language words (Piantadosi 2014, "Zipf's word frequency law in natural language: a critical
review and future directions", Psychon. Bull. Rev. 21:1112-1130). That review is about words, not BPE
tokens: the default s = 1.1 is an assumption in the 1.0-1.2 band, to be varied as a sensitivity. Since
tid2eid is a hash, the table is drawn here as uniform random distinct experts per token id, seeded: one
random table, as the real one is a single draw (the imbalance at small EP depends on which experts the most
frequent ids land on; vary `seed` to see the spread).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfmodel.inputs.model import FFNSpec
from perfmodel.memo import Memo

DEFAULT_BALANCE_FACTOR = 1.0  # force-balanced benchmarks (docs/reference/hardware.md 3e, S17 page note)
DEFAULT_ZIPF_S = 1.1  # Piantadosi 2014: word-frequency exponent ~1; 1.1 assumed for BPE tokens (see above)
HASH_SAMPLES = 4  # batches drawn per estimate; max/mean is averaged over them
HEAD_IDS = 8192  # most frequent token ids sampled individually per batch (the rest in the normal limit)


@dataclass(frozen=True, slots=True)
class MoEAssumptions:
    """What the scenario does not say about routing. Hashable: part of the chunk-cost cache key."""

    balance_factor: float = DEFAULT_BALANCE_FACTOR  # learned routing: max/mean tokens over EP ranks
    zipf_s: float = DEFAULT_ZIPF_S
    seed: int = 0
    # Host time of one MoE layer, forward and backward: eager Megatron's alltoall dispatcher copies token counts
    # to the host every MoE layer (tokens_per_expert for the all-to-all splits and the grouped GEMM), so the host
    # cannot run ahead of the GPU there and the layer takes at least the host's time to issue its ops.
    # Measured by benchmarks/measure_host_ops.py (benchmarks/results/host-ops.json): a grouped-GEMM MoE layer of
    # megatron-core 0.16.1 issues 139 aten ops forward and 155 backward, at 26.96 us and 11.88 us per op on the
    # measuring host (tiny tensors, one thread): 3.75 ms and 1.84 ms. The measuring host is a 2-core VM, not a
    # GPU server's CPU, and a GPU launch adds a few us per op: treat as an estimate; 0 turns the floor off.
    layer_host_fwd_s: float = 139 * 26.96e-6
    layer_host_bwd_s: float = 155 * 11.88e-6
    # A dense layer's host time (same file: 101 ops forward at 18.23 us, 139 backward at 7.53 us). Without a sync
    # the host runs ahead, but over a step it cannot issue faster than this: a throughput floor per layer.
    dense_host_fwd_s: float = 101 * 18.23e-6
    dense_host_bwd_s: float = 139 * 7.53e-6


def _hash_table(vocab: int, experts: int, top_k: int, seed: int, memo: Memo) -> np.ndarray:
    return memo.get("moe_hash_table", (vocab, experts, top_k, seed),
                    lambda: _build_hash_table(vocab, experts, top_k, seed))


def _build_hash_table(vocab: int, experts: int, top_k: int, seed: int) -> np.ndarray:
    """[vocab, top_k] expert ids, distinct within a row, uniform; read-only. Rows with a repeated expert are
    redrawn (about 6% of rows for 6 of 256), column by column to stay vectorised."""
    if top_k > experts:
        raise ValueError(f"top_k {top_k} > experts {experts}")
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, experts, size=(top_k, vocab), dtype=np.int16)  # column-major: one row per slot
    bad = np.arange(vocab)
    for _ in range(1000):
        sub = cols[:, bad]
        dup = np.zeros(bad.size, dtype=bool)
        for i in range(top_k):
            for j in range(i + 1, top_k):
                dup |= sub[i] == sub[j]
        bad = bad[dup]
        if bad.size == 0:
            break
        cols[:, bad] = rng.integers(0, experts, size=(top_k, bad.size), dtype=np.int16)
    table = np.ascontiguousarray(cols.T)
    table.setflags(write=False)
    return table


def _zipf(vocab: int, zipf_s: float, memo: Memo) -> np.ndarray:
    return memo.get("zipf", (vocab, zipf_s), lambda: _build_zipf(vocab, zipf_s))


def _build_zipf(vocab: int, zipf_s: float) -> np.ndarray:
    """Probabilities of token frequency ranks 1..vocab."""
    p = np.arange(1, vocab + 1, dtype=np.float64) ** (-zipf_s)
    p /= p.sum()
    p.setflags(write=False)
    return p


def _tail_load(vocab: int, experts: int, top_k: int, zipf_s: float, seed: int, head: int, memo: Memo) -> np.ndarray:
    return memo.get("moe_tail_load", (vocab, experts, top_k, zipf_s, seed, head),
                    lambda: _build_tail_load(vocab, experts, top_k, zipf_s, seed, head, memo))


def _build_tail_load(vocab: int, experts: int, top_k: int, zipf_s: float, seed: int, head: int,
                     memo: Memo) -> np.ndarray:
    """Expected per-expert assignments of one token drawn from the ids ranked below `head`."""
    p = _zipf(vocab, zipf_s, memo)
    table = _hash_table(vocab, experts, top_k, seed, memo)
    out = np.zeros(experts)
    for j in range(top_k):
        out += np.bincount(table[head:, j], weights=p[head:], minlength=experts)
    out.setflags(write=False)
    return out


def hash_expert_load(vocab: int, experts: int, top_k: int, tokens: int, zipf_s: float = DEFAULT_ZIPF_S,
                     seed: int = 0, sample: int = 0, memo: Memo | None = None) -> np.ndarray:
    """Token-expert assignments per expert for batch `sample` of about `tokens` tokens drawn from Zipf(s)
    over the vocab (tokens <= 0: the expected load of one token), routed through the hash table.

    Counts are Poisson(tokens x p) per id (the large-vocabulary limit of the multinomial). The HEAD_IDS most
    frequent ids are drawn one by one; the many rare ids below them enter per expert in the normal limit of
    their summed Poisson counts, N(mu, mu), which keeps a batch to a few vectorised calls."""
    memo = memo if memo is not None else Memo()
    p = _zipf(vocab, zipf_s, memo)
    table = _hash_table(vocab, experts, top_k, seed, memo)
    if tokens <= 0:
        return np.bincount(table.ravel(), weights=np.repeat(p, top_k), minlength=experts)
    rng = np.random.default_rng((seed, sample))
    head = min(vocab, HEAD_IDS)
    counts = rng.poisson(tokens * p[:head]).astype(np.float64)
    load = np.bincount(table[:head].ravel(), weights=np.repeat(counts, top_k), minlength=experts)
    if head < vocab:
        mu = tokens * _tail_load(vocab, experts, top_k, zipf_s, seed, head, memo)
        load += np.maximum(0.0, rng.normal(mu, np.sqrt(mu)))
    return load


def hash_routing_imbalance(vocab: int, experts: int, top_k: int, ep: int, tokens: int,
                           zipf_s: float = DEFAULT_ZIPF_S, seed: int = 0, memo: Memo | None = None) -> float:
    """max/mean token-expert assignments over EP ranks (experts split contiguously, experts/ep per rank) for
    hash routing of Zipf-distributed tokens; `tokens` per batch in the EP group (<= 0: expected load)."""
    if ep <= 1:
        return 1.0
    memo = memo if memo is not None else Memo()
    return memo.get("hash_imbalance", (vocab, experts, top_k, ep, tokens, zipf_s, seed),
                    lambda: _hash_imbalance(vocab, experts, top_k, ep, tokens, zipf_s, seed, memo))


def _hash_imbalance(vocab: int, experts: int, top_k: int, ep: int, tokens: int, zipf_s: float, seed: int,
                    memo: Memo) -> float:
    if experts % ep:
        raise ValueError(f"{experts} experts do not split over ep {ep}")
    ratios = []
    for i in range(1 if tokens <= 0 else HASH_SAMPLES):
        load = hash_expert_load(vocab, experts, top_k, tokens, zipf_s, seed, i, memo)
        per_rank = load.reshape(ep, experts // ep).sum(axis=1)
        ratios.append(per_rank.max() / per_rank.mean())
    return float(np.mean(ratios))


def layer_imbalance(ffn: FFNSpec, vocab: int, ep: int, tokens_in_ep_group: float, a: MoEAssumptions,
                    memo: Memo | None = None) -> float:
    """max/mean load over EP ranks for one MoE layer (1 for ep == 1: one rank holds every expert)."""
    if ffn.kind != "moe" or ep <= 1:
        return 1.0
    if ffn.hash_routed:
        return hash_routing_imbalance(vocab, ffn.num_experts, ffn.top_k, ep, int(round(tokens_in_ep_group)),
                                      a.zipf_s, a.seed, memo)
    return max(1.0, a.balance_factor)
