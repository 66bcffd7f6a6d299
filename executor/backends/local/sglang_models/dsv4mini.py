"""Dsv4MiniForCausalLM for SGLang: the DSV4-mini model (executor/backends/local/dsv4mini/math.py) as an SGLang model
class, registered through SGLANG_EXTERNAL_MODEL_PACKAGE=executor.backends.local.sglang_models (the local rollout
engine sets it; SGLang imports every module of the package and takes its EntryClass).

SGLang's own parts where they exist: the paged KV cache and attention (RadixAttention, with its
`sliding_window_size` for the window), its rotary embedding, vocabulary embedding, LM head and logits processor (so
sampling and log-probs are SGLang's). The DSV4 parts call the shared math: hash routing, the MoE's weights,
hyper-connections. Weights load under the Hugging Face names `tiny_model.megatron_to_hf` writes.

`PERFMODEL_ALIGN_DUMP_DIR` set: each prefill writes what `executor align` compares, per layer (the attention and FFN
outputs, the streams after the layer, the experts each token went to), with the batch's input ids, to
`<dir>/<pid>-<n>.pt`.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable

import torch
from torch import nn

from executor.backends.local.dsv4mini import math as dm

_DUMPS = itertools.count()


class _RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = self.weight.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class _Attention(nn.Module):
    def __init__(self, config: object, layer_id: int) -> None:
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.layers.rotary_embedding import get_rope

        super().__init__()
        h, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.hd = h // heads
        self.q_proj = nn.Linear(h, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(h, kv * self.hd, bias=False)
        self.v_proj = nn.Linear(h, kv * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, h, bias=False)
        theta = getattr(config, "rope_theta", None) or (getattr(config, "rope_parameters", None) or {})["rope_theta"]
        self.rotary_emb = get_rope(self.hd, rotary_dim=self.hd, max_position=config.max_position_embeddings,
                                   base=int(theta))
        window = getattr(config, "sliding_window", None) or 0
        self.attn = RadixAttention(heads, self.hd, self.hd ** -0.5, num_kv_heads=kv, layer_id=layer_id,
                                   sliding_window_size=dm.left_context(window) if window else -1)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, forward_batch: object) -> torch.Tensor:
        q, k = self.rotary_emb(positions, self.q_proj(x), self.k_proj(x))
        return self.o_proj(self.attn(q, k, self.v_proj(x), forward_batch))


class _Expert(nn.Module):
    def __init__(self, h: int, f: int) -> None:
        super().__init__()
        self.w1, self.w3 = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class _MoE(nn.Module):
    def __init__(self, config: object, layer_id: int) -> None:
        super().__init__()
        h, e = config.hidden_size, config.num_local_experts
        self.topk = config.num_experts_per_tok
        self.gate = nn.Linear(h, e, bias=False)
        self.experts = nn.ModuleList(_Expert(h, config.intermediate_size) for _ in range(e))
        hashed = layer_id < getattr(config, "num_hash_layers", 0)
        self.table = dm.hash_table(config.vocab_size, e, self.topk, config.hash_seed) if hashed else None
        self.last_ids: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        ids, w = dm.route(self.gate(x), self.topk, token_ids, self.table)
        self.last_ids = ids
        out = torch.zeros_like(x, dtype=torch.float32)
        for e, expert in enumerate(self.experts):
            rows, slot = (ids == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(x[rows]).float() * w[rows, slot].unsqueeze(-1))
        return out.to(x.dtype)


class _Layer(nn.Module):
    def __init__(self, config: object, layer_id: int) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = _Attention(config, layer_id)
        self.block_sparse_moe = _MoE(config, layer_id)
        self.input_layernorm, self.post_attention_layernorm = _RMSNorm(h, eps), _RMSNorm(h, eps)
        n, iters, hc_eps = config.hc_mult, config.hc_sinkhorn_iters, getattr(config, "hc_eps", 1e-6)
        self.hc_attn = dm.HyperConnection(h, n, iters, hc_eps)
        self.hc_ffn = dm.HyperConnection(h, n, iters, hc_eps)

    def forward(self, positions: torch.Tensor, streams: torch.Tensor, forward_batch: object,
                token_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        streams, attn = self.hc_attn(streams, lambda x: self.self_attn(
            positions, self.input_layernorm(x.to(dtype)), forward_batch))
        mid = streams
        streams, ffn = self.hc_ffn(streams, lambda x: self.block_sparse_moe(
            self.post_attention_layernorm(x.to(dtype)), token_ids))
        return streams, {"attention": attn, "attention_streams": mid, "ffn": ffn, "streams": streams,
                         "experts": self.block_sparse_moe.last_ids}


class Dsv4MiniForCausalLM(nn.Module):
    def __init__(self, config: object, quant_config: object = None, prefix: str = "") -> None:
        from sglang.srt.layers.logits_processor import LogitsProcessor
        from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

        super().__init__()
        self.config = config
        self.n = config.hc_mult
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(_Layer(config, i) for i in range(config.num_hidden_layers))
        self.norm = _RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size)
        self.logits_processor = LogitsProcessor(config)

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: object,
                input_embeds: torch.Tensor | None = None, **_: object) -> object:
        x = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        dtype = x.dtype
        streams = dm.expand_streams(x, self.n)
        records = []
        for layer in self.layers:
            streams, rec = layer(positions, streams, forward_batch, input_ids, dtype)
            records.append(rec)
        hidden = self.norm(dm.contract_streams(streams).to(dtype))
        self._dump(input_ids, forward_batch, records)
        return self.logits_processor(input_ids, hidden, self.lm_head, forward_batch)

    @staticmethod
    def _dump(input_ids: torch.Tensor, forward_batch: object, records: list[dict[str, torch.Tensor]]) -> None:
        folder = os.environ.get("PERFMODEL_ALIGN_DUMP_DIR")
        if not folder or not forward_batch.forward_mode.is_extend():
            return
        data = {"input_ids": input_ids.cpu(),
                "layers": [{k: v.detach().float().cpu() if k != "experts" else v.cpu() for k, v in r.items()}
                           for r in records]}
        path = os.path.join(folder, f"{os.getpid()}-{next(_DUMPS):05d}.pt")
        torch.save(data, path + ".tmp")
        os.replace(path + ".tmp", path)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(self.named_parameters())
        for name, w in weights:
            key = name.removeprefix("model.")
            param = params.get(key)
            if param is None:
                raise KeyError(f"Dsv4MiniForCausalLM has no parameter for {name}")
            loader = getattr(param, "weight_loader", None)
            if loader is not None:
                loader(param, w)
            else:
                with torch.no_grad():
                    param.copy_(w.to(param.dtype))


EntryClass = Dsv4MiniForCausalLM
