"""The plain-PyTorch reference `executor align` holds both engines against: the local model family (Llama, Mixtral,
DSV4-mini) computed in FP32 from the same Hugging Face tensors, one sequence at a time, with every layer's parts kept.

Its conventions are the models' own: RMSNorm in FP32, neox-style RoPE (rotate half), grouped-query attention with
the causal (and sliding-window) mask of `dsv4mini.math.window_mask`, SwiGLU; Mixtral routes by the softmax's top-k
renormalized, DSV4-mini by `dsv4mini.math.route`; DSV4-mini's residual is `dsv4mini.math.HyperConnection`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from executor.backends.local.dsv4mini import math as dm
from executor.backends.local.tiny_model import TinyArch


@dataclass
class LayerParts:
    """One layer's outputs for one sequence, in the order they are computed: attention [s, h], the residual after
    it ([s, h]; DSV4-mini: the streams after the attention's hyper-connection, [s, n, h]), FFN / MoE [s, h], the
    hidden state after the layer ([s, h] or the streams), and for MoE layers each token's experts [s, k]."""

    attention: torch.Tensor
    attention_residual: torch.Tensor
    ffn: torch.Tensor
    hidden: torch.Tensor
    experts: torch.Tensor | None = None


COMPONENTS = ("attention", "attention_residual", "ffn", "hidden")


@dataclass
class Forward:
    layers: list[LayerParts] = field(default_factory=list)
    log_probs: torch.Tensor | None = None  # [s - 1]: log p(token t | tokens < t), t = 1 .. s-1


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """x [s, heads, d], neox style."""
    s, d = x.shape[0], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(s, dtype=torch.float64).unsqueeze(1) * inv.unsqueeze(0)
    cos, sin = torch.cat([ang, ang], -1).cos().float(), torch.cat([ang, ang], -1).sin().float()
    half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * cos.unsqueeze(1) + half * sin.unsqueeze(1)


class Reference:
    def __init__(self, arch: TinyArch, tensors: dict[str, torch.Tensor]) -> None:
        self.arch = arch
        self.w = {k: v.float() for k, v in tensors.items()}
        self.tables = {}
        if arch.is_dsv4mini:
            table = dm.hash_table(arch.vocab_size, arch.num_experts, arch.experts_per_token, arch.hash_seed)
            self.tables = {i: table for i in range(arch.num_hash_layers)}
            self.hc = {}
            for i in range(arch.num_layers):
                for part in ("hc_attn", "hc_ffn"):
                    hc = dm.HyperConnection(arch.hidden_size, arch.hc_mult, arch.sinkhorn_iters, arch.hc_eps)
                    for name in ("fn", "scale", "base"):
                        getattr(hc, name).data.copy_(self.w[f"model.layers.{i}.{part}.{name}"])
                    self.hc[i, part] = hc

    def _attention(self, i: int, x: torch.Tensor) -> torch.Tensor:
        a, p = self.arch, f"model.layers.{i}.self_attn"
        s, hd = x.shape[0], a.head_dim
        q = (x @ self.w[f"{p}.q_proj.weight"].t()).view(s, a.num_heads, hd)
        k = (x @ self.w[f"{p}.k_proj.weight"].t()).view(s, a.num_kv_heads, hd)
        v = (x @ self.w[f"{p}.v_proj.weight"].t()).view(s, a.num_kv_heads, hd)
        q, k = _rope(q, a.rope_theta), _rope(k, a.rope_theta)
        rep = a.num_heads // a.num_kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5
        scores = scores.masked_fill(~dm.window_mask(s, a.sliding_window or None), float("-inf"))
        out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(s, -1)
        return out @ self.w[f"{p}.o_proj.weight"].t()

    def _swiglu(self, x: torch.Tensor, gate: str, up: str, down: str) -> torch.Tensor:
        return (torch.nn.functional.silu(x @ self.w[gate].t()) * (x @ self.w[up].t())) @ self.w[down].t()

    def _ffn(self, i: int, x: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        a = self.arch
        if not a.is_moe:
            p = f"model.layers.{i}.mlp"
            return self._swiglu(x, f"{p}.gate_proj.weight", f"{p}.up_proj.weight", f"{p}.down_proj.weight"), None
        p = f"model.layers.{i}.block_sparse_moe"
        logits = x @ self.w[f"{p}.gate.weight"].t()
        if a.is_dsv4mini:
            ids, weights = dm.route(logits, a.experts_per_token, tokens, self.tables.get(i))
        else:
            top = logits.softmax(-1).topk(a.experts_per_token, dim=-1)
            ids, weights = top.indices, top.values / top.values.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for slot in range(ids.shape[1]):
            for e in ids[:, slot].unique().tolist():
                rows = ids[:, slot] == e
                y = self._swiglu(x[rows], f"{p}.experts.{e}.w1.weight", f"{p}.experts.{e}.w3.weight",
                                 f"{p}.experts.{e}.w2.weight")
                out[rows] += y * weights[rows, slot].unsqueeze(-1)
        return out, ids

    def forward(self, tokens: torch.Tensor) -> Forward:
        """tokens [s] (one sequence) -> every layer's parts and the next-token log-probs."""
        a, eps = self.arch, self.arch.rms_norm_eps
        x = self.w["model.embed_tokens.weight"][tokens]
        out = Forward()
        streams = dm.expand_streams(x, a.hc_mult) if a.is_dsv4mini else None
        for i in range(a.num_layers):
            p = f"model.layers.{i}"
            experts: list[torch.Tensor | None] = [None]

            def attn(h: torch.Tensor, i: int = i, p: str = p) -> torch.Tensor:
                return self._attention(i, _rms(h, self.w[f"{p}.input_layernorm.weight"], eps))

            def ffn(h: torch.Tensor, i: int = i, p: str = p, experts: list = experts) -> torch.Tensor:
                y, experts[0] = self._ffn(i, _rms(h, self.w[f"{p}.post_attention_layernorm.weight"], eps), tokens)
                return y

            if streams is not None:
                streams, a_out = self.hc[i, "hc_attn"](streams, attn)
                mid = streams
                streams, f_out = self.hc[i, "hc_ffn"](streams, ffn)
                hidden = streams
            else:
                a_out = attn(x)
                x = mid = x + a_out
                f_out = ffn(x)
                x = hidden = x + f_out
            out.layers.append(LayerParts(a_out, mid.clone(), f_out, hidden.clone(), experts[0]))
        final = dm.contract_streams(streams) if streams is not None else x
        logits = _rms(final, self.w["model.norm.weight"], eps) @ self.w["lm_head.weight"].t()
        out.log_probs = torch.log_softmax(logits.float(), -1)[:-1].gather(-1, tokens[1:].unsqueeze(-1)).squeeze(-1)
        return out
