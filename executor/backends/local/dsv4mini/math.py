"""DeepSeek-V4's own components in miniature, written once: SGLang serves them (`sglang_models/dsv4mini.py`),
megatron-core trains them (`dsv4mini/megatron_layer.py`) and the align reference runs them (`align/reference.py`),
each calling these functions, so the two engines differ only where they are meant to (kernels, precision) or where
a configuration differs (what `executor align` finds).

- Hash routing (DSV4's first `num_hash_layers` MoE layers): a token id -> experts table drawn from `hash_seed`;
  the router's scores only weigh the experts the table names. Learned layers take the top-k of the scores.
  Scores are DSV4's `sqrtsoftplus` (sqrt(softplus(logit))), the chosen weights normalized to sum 1.
- Sliding-window attention: a query sees its own position and the `sliding_window - 1` before it (`left_context`;
  megatron-core's `window_size=(left, 0)` and SGLang's `sliding_window_size=left` both mean that).
- Hyper-connections with Sinkhorn mixing (mHC, DeepSeek-V4's residual): `hc_mult` residual streams in FP32; around
  each sublayer, coefficients from the RMS-normalized streams give the sublayer's input (a weighted sum of the
  streams, H_pre), how its output is added back to each stream (H_post) and how the streams mix (H_res, a doubly
  stochastic matrix from `hc_sinkhorn_iters` Sinkhorn-Knopp iterations). The embedding is copied into every stream;
  the last layer's streams are averaged.
"""

from __future__ import annotations

import torch
from torch import nn


def left_context(sliding_window: int) -> int:
    """Positions before the query that a sliding-window query attends to (the window holds the query too)."""
    return sliding_window - 1


def window_mask(seq_len: int, sliding_window: int | None, device: torch.device | None = None) -> torch.Tensor:
    """[q, k] bool, True where the query may attend: causal, and within the window when there is one."""
    q = torch.arange(seq_len, device=device).unsqueeze(1)
    k = torch.arange(seq_len, device=device).unsqueeze(0)
    ok = k <= q
    if sliding_window:
        ok &= k >= q - left_context(sliding_window)
    return ok


def hash_table(vocab_size: int, num_experts: int, topk: int, seed: int) -> torch.Tensor:
    """[vocab, topk] long: each token id's `topk` distinct experts, fixed by `seed` (identical on every engine)."""
    # float64 stated: under SGLang's default dtype (bfloat16 while it builds a model) the draws would tie and the
    # argsort pick other experts (the first disagreement `executor align` found: layer 0 routing, 98.4%)
    g = torch.Generator().manual_seed(int(seed))
    draws = torch.rand(vocab_size, num_experts, generator=g, dtype=torch.float64)
    return draws.argsort(dim=1, stable=True)[:, :topk].contiguous()


def scores(router_logits: torch.Tensor) -> torch.Tensor:
    """DSV4's sqrtsoftplus scoring, in FP32."""
    return torch.sqrt(torch.nn.functional.softplus(router_logits.float()))


def route(router_logits: torch.Tensor, topk: int, token_ids: torch.Tensor | None = None,
          table: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert ids [T, k], weights [T, k] FP32 summing to 1): the table's experts for `token_ids` (hash layer), or
    the top-k of the scores."""
    s = scores(router_logits)
    if table is not None:
        assert token_ids is not None
        ids = table.to(s.device)[token_ids.long()]
    else:
        ids = s.topk(topk, dim=-1).indices
    w = s.gather(1, ids)
    return ids, w / w.sum(-1, keepdim=True).clamp_min(1e-20)


def sinkhorn(logits: torch.Tensor, iters: int) -> torch.Tensor:
    """[..., n, n] -> doubly stochastic (rows and columns sum to 1) by `iters` Sinkhorn-Knopp iterations on
    exp(logits), in FP32."""
    m = torch.exp(logits.float() - logits.float().amax(dim=(-1, -2), keepdim=True))
    for _ in range(iters):
        m = m / m.sum(dim=-1, keepdim=True)
        m = m / m.sum(dim=-2, keepdim=True)
    return m


def expand_streams(x: torch.Tensor, n: int) -> torch.Tensor:
    """[T, h] -> [T, n, h] FP32: the embedding copied into each stream."""
    return x.float().unsqueeze(-2).expand(*x.shape[:-1], n, x.shape[-1]).contiguous()


def contract_streams(streams: torch.Tensor) -> torch.Tensor:
    """[T, n, h] -> [T, h]: the streams averaged (after the last layer)."""
    return streams.mean(dim=-2)


class HyperConnection(nn.Module):
    """One mHC around one sublayer. Parameters: `fn` [n*h, 2n + n*n] (the coefficients' projection), `scale` [3]
    (their gains) and `base` [2n + n*n] (their biases); HF names <layer>.hc_attn.* / <layer>.hc_ffn.*."""

    def __init__(self, hidden: int, n: int, sinkhorn_iters: int, eps: float = 1e-6,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.n, self.hidden, self.sinkhorn_iters, self.eps = n, hidden, sinkhorn_iters, eps
        width = 2 * n + n * n
        self.fn = nn.Parameter(torch.empty(n * hidden, width, dtype=dtype))
        self.scale = nn.Parameter(torch.empty(3, dtype=dtype))
        self.base = nn.Parameter(torch.empty(width, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        with torch.no_grad():
            self.fn.normal_(0.0, 0.02, generator=generator)
            self.scale.fill_(0.1)
            n = self.n
            base = torch.zeros(2 * n + n * n)
            # mixing that leans to the identity but mixes, as a trained mHC does (Sinkhorn's iterations matter)
            base[2 * n:] = (torch.eye(n) + 1.5 * torch.randn(n, n, generator=generator)).flatten()
            self.base.copy_(base)

    def coefficients(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """streams [T, n, h] -> (H_pre [T, n], H_post [T, n], H_res [T, n, n]), all FP32."""
        n = self.n
        flat = streams.float().flatten(-2)
        flat = flat * torch.rsqrt(flat.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        proj = flat @ self.fn.float()
        pre, post, res = proj.split([n, n, n * n], dim=-1)
        a, b = self.scale.float(), self.base.float()
        h_pre = torch.sigmoid(a[0] * pre + b[:n])
        h_post = 2.0 * torch.sigmoid(a[1] * post + b[n:2 * n])
        h_res = sinkhorn((a[2] * res + b[2 * n:]).unflatten(-1, (n, n)), self.sinkhorn_iters)
        return h_pre, h_post, h_res

    @staticmethod
    def sublayer_input(streams: torch.Tensor, h_pre: torch.Tensor) -> torch.Tensor:
        """[T, n, h] -> [T, h] FP32: the streams weighted by H_pre."""
        return (h_pre.unsqueeze(-1) * streams.float()).sum(dim=-2)

    @staticmethod
    def fold(streams: torch.Tensor, out: torch.Tensor, h_post: torch.Tensor, h_res: torch.Tensor) -> torch.Tensor:
        """The streams after the sublayer: H_res mixes them, H_post adds its output [T, h] to each."""
        return h_res @ streams.float() + h_post.unsqueeze(-1) * out.float().unsqueeze(-2)

    def forward(self, streams: torch.Tensor, sublayer: object) -> tuple[torch.Tensor, torch.Tensor]:
        """(new streams, the sublayer's output): `sublayer` maps [T, h] FP32 to [T, h]."""
        h_pre, h_post, h_res = self.coefficients(streams)
        out = sublayer(self.sublayer_input(streams, h_pre))  # type: ignore[operator]
        return self.fold(streams, out, h_post, h_res), out
