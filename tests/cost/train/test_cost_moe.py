"""Expert-load imbalance: hash routing over Zipf-distributed tokens, learned-routing balance factor."""

from __future__ import annotations

import pytest

from perfmodel.cost.train.moe import (
    MoEAssumptions,
    hash_expert_load,
    hash_routing_imbalance,
    layer_imbalance,
)
from perfmodel.inputs.model import load_model
from perfmodel.memo import Memo

V, E, K = 129280, 256, 6  # DeepSeek-V4-Flash vocab, routed experts, top-k


def test_hash_imbalance_above_one():
    assert hash_routing_imbalance(V, E, K, 8, 16384, 1.1, 0) > 1.05
    assert hash_routing_imbalance(V, E, K, 1, 16384, 1.1, 0) == 1.0


@pytest.mark.parametrize("tokens", [0, 65536])
def test_hash_imbalance_rises_with_zipf_exponent(tokens):
    vals = [hash_routing_imbalance(V, E, K, 8, tokens, s, 0) for s in (0.9, 1.0, 1.1, 1.2)]
    assert vals == sorted(vals) and vals[-1] > vals[0] + 0.05


@pytest.mark.parametrize("tokens", [0, 65536])
def test_hash_imbalance_rises_with_ep(tokens):
    vals = [hash_routing_imbalance(V, E, K, ep, tokens, 1.1, 0) for ep in (2, 4, 8, 16, 32)]
    assert vals == sorted(vals) and vals[-1] > 1.5


def test_expected_load_conserves_assignments():
    load = hash_expert_load(V, E, K, 0, 1.1, 0)
    assert load.sum() == pytest.approx(K)  # each token goes to top_k distinct experts
    sampled = hash_expert_load(V, E, K, 20000, 1.1, 0)
    assert sampled.sum() == pytest.approx(K * 20000, rel=0.05)


def test_hash_imbalance_reuses_the_callers_memo():
    memo = Memo()
    a = hash_routing_imbalance(V, E, K, 4, 4096, 1.15, 7, memo)  # builds the seed-7 table and the Zipf tail
    assert memo.size("moe_hash_table") == 1 and memo.size("zipf") == 1 and memo.size("moe_tail_load") == 1
    b = hash_routing_imbalance(V, E, K, 8, 36864, 1.15, 7, memo)  # new ep and batch size: same table and tail
    assert memo.size("moe_hash_table") == 1 and memo.size("moe_tail_load") == 1
    assert memo.size("hash_imbalance") == 2
    assert hash_routing_imbalance(V, E, K, 8, 36864, 1.15, 7, memo) == b
    assert hash_routing_imbalance(V, E, K, 4, 4096, 1.15, 7) == a  # a fresh memo gives the same number


def test_layer_imbalance_learned_vs_hash():
    m = load_model("deepseek-v4-flash")
    hashed, learned = m.layers[0].ffn, m.layers[10].ffn
    assert hashed.hash_routed and not learned.hash_routed
    a = MoEAssumptions(balance_factor=1.2)
    assert layer_imbalance(learned, m.vocab_size, 8, 32768, a) == 1.2
    assert layer_imbalance(learned, m.vocab_size, 8, 32768, MoEAssumptions()) == 1.0
    assert layer_imbalance(hashed, m.vocab_size, 8, 32768, a) > 1.05
    assert layer_imbalance(hashed, m.vocab_size, 1, 32768, a) == 1.0
