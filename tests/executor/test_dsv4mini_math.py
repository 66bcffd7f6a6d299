"""The DSV4 miniature's shared math (executor/backends/local/dsv4mini/math.py), against what each engine's own code
means by the same thing: the hash table whatever the default dtype, Sinkhorn's doubly stochastic mixing, the window
as megatron-core and SGLang mask it, routing weights, and the hyper-connection's fold."""

from __future__ import annotations

import pytest
import torch

from executor.backends.local.dsv4mini import math as dm


def test_the_hash_table_is_the_same_under_any_default_dtype() -> None:
    a = dm.hash_table(64, 4, 2, seed=7)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # what SGLang sets while it builds a model
    try:
        b = dm.hash_table(64, 4, 2, seed=7)
    finally:
        torch.set_default_dtype(old)
    assert torch.equal(a, b) and a.shape == (64, 2)
    assert all(len(set(row.tolist())) == 2 for row in a)  # distinct experts per token
    assert not torch.equal(a, dm.hash_table(64, 4, 2, seed=8))


def test_sinkhorn_makes_rows_and_columns_sum_to_one() -> None:
    """Columns exactly (its last normalization), rows to what 20 iterations reach, better with more."""
    z = torch.randn(10, 4, 4, generator=torch.Generator().manual_seed(0)) * 2
    m = dm.sinkhorn(z, iters=20)
    assert torch.allclose(m.sum(-2), torch.ones(10, 4), atol=1e-6)
    row_err = (m.sum(-1) - 1).abs().max()
    assert row_err < 1e-2 and (dm.sinkhorn(z, iters=200).sum(-1) - 1).abs().max() < row_err / 10
    assert (m > 0).all()


def test_the_window_is_what_megatron_and_sglang_mask() -> None:
    """The query and the window - 1 tokens before it: megatron-core's window_size=(W-1, 0) mask and SGLang's
    torch-native mask with sliding_window_size=W-1 keep the same keys."""
    from megatron.core.transformer.utils import get_sliding_window_causal_mask

    s, w = 9, 4
    ours = dm.window_mask(s, w)
    assert ours.sum(-1).tolist() == [1, 2, 3, 4, 4, 4, 4, 4, 4]
    import unittest.mock as mock

    ones = torch.ones  # megatron builds the mask on "cuda"; here on the CPU
    with mock.patch("torch.ones", lambda *a, **k: ones(*a, **{**k, "device": "cpu"})):
        masked = get_sliding_window_causal_mask(s, s, (dm.left_context(w), 0))
    assert torch.equal(~masked, ours)
    q, k = torch.arange(s).unsqueeze(1), torch.arange(s).unsqueeze(0)
    sglang = (k <= q) & (k >= q - dm.left_context(w))  # torch_native_backend._make_sliding_window_mask
    assert torch.equal(sglang, ours)


def test_routing_weights_sum_to_one_and_hash_layers_use_the_table() -> None:
    logits = torch.randn(6, 4)
    ids, w = dm.route(logits, 2)
    assert torch.equal(ids, dm.scores(logits).topk(2, -1).indices)
    assert torch.allclose(w.sum(-1), torch.ones(6))
    table = dm.hash_table(16, 4, 2, seed=1)
    tokens = torch.tensor([3, 3, 5, 9, 0, 15])
    ids, w = dm.route(logits, 2, tokens, table)
    assert torch.equal(ids, table[tokens]) and torch.allclose(w.sum(-1), torch.ones(6))


@pytest.mark.parametrize("n", [1, 4])
def test_a_hyper_connection_folds_the_sublayer_back_into_the_streams(n: int) -> None:
    torch.manual_seed(0)
    hc = dm.HyperConnection(8, n, sinkhorn_iters=20)
    streams = dm.expand_streams(torch.randn(5, 8), n)
    new, out = hc(streams, lambda x: 2 * x)
    h_pre, h_post, h_res = hc.coefficients(streams)
    assert torch.allclose(out, 2 * (h_pre.unsqueeze(-1) * streams).sum(-2))
    assert torch.allclose(new, h_res @ streams + h_post.unsqueeze(-1) * out.unsqueeze(-2), atol=1e-6)
    assert new.shape == (5, n, 8) and dm.contract_streams(new).shape == (5, 8)
