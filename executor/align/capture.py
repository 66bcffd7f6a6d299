"""What each engine computes for the same sequences, layer by layer, for `executor align`.

- `TrainerCapture`: the megatron-core model the local backend trains (one rank, TP/PP/EP 1), called on one
  sequence at a time with hooks on every layer's attention, MLP / MoE and router (the DSV4-mini layer keeps its
  parts itself), and its next-token log-probs in FP32 as the log-prob pass computes them.
- `RolloutCapture`: the SGLang engine serving the same weights (FP8-quantized for an FP8 rollout), asked for each
  sequence's input log-probs (a prefill, one new token); a model class that dumps its layers
  (`sglang_models/dsv4mini.py`, PERFMODEL_ALIGN_DUMP_DIR) gives its parts too. SGLang's own Llama and Mixtral do not:
  for them the rollout side is its log-probs only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from executor.align.reference import Forward, LayerParts


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


class TrainerCapture:
    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        inner = trainer.model
        while hasattr(inner, "module"):
            inner = inner.module
        self.layers = list(inner.decoder.layers)
        self.arch = trainer.arch
        self._parts: dict[tuple[int, str], torch.Tensor] = {}
        if not self.arch.is_dsv4mini:
            for i, layer in enumerate(self.layers):
                layer.register_forward_pre_hook(self._keep_input(i), with_kwargs=True)
                layer.self_attention.register_forward_hook(self._keep(i, "attention"))
                layer.mlp.register_forward_hook(self._keep(i, "ffn"))
                layer.register_forward_hook(self._keep(i, "hidden"))
                if hasattr(layer.mlp, "router"):
                    layer.mlp.router.register_forward_hook(self._keep(i, "routing"))

    def _keep_input(self, i: int) -> Any:
        def hook(_m: Any, args: tuple, kwargs: dict) -> None:
            self._parts[i, "input"] = (kwargs.get("hidden_states") if "hidden_states" in kwargs else args[0]).detach(
            ).clone()

        return hook

    def _keep(self, i: int, what: str) -> Any:
        def hook(_m: Any, _args: Any, out: Any) -> None:
            # a copy: megatron's bias-dropout-add adds the residual into the sublayer's output in place
            self._parts[i, what] = (out[1] if what == "routing" else _first(out)).detach().clone()

        return hook

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor) -> Forward:
        """tokens [s] -> the layers' parts ([s, ...], FP32) and log p(token t | < t)."""
        model, dev = self.trainer.model, self.trainer.device
        model.eval()
        s = tokens.shape[0]
        self._parts.clear()
        logits = model(tokens.view(1, s).to(dev), torch.arange(s, device=dev).view(1, s), None)
        out = Forward(log_probs=torch.log_softmax(logits[0].float(), -1)[:-1].gather(
            -1, tokens[1:].to(dev).unsqueeze(-1)).squeeze(-1).cpu())
        k = self.arch.experts_per_token
        for i, layer in enumerate(self.layers):
            if self.arch.is_dsv4mini:
                router = getattr(layer.mlp, "router", None)
                kept = (layer.last_attention, layer.last_attn_streams, layer.last_ffn, layer.last_streams)
                parts = LayerParts(*(t[:, 0].float().cpu() for t in kept),
                                   router.last_expert_ids.cpu() if router is not None else None)
            else:
                attn, ffn, hidden, inp = (self._parts[i, w][:, 0].float().cpu()
                                          for w in ("attention", "ffn", "hidden", "input"))
                routing = self._parts.get((i, "routing"))
                experts = routing.float().topk(k, dim=-1).indices.cpu() if routing is not None else None
                parts = LayerParts(attn, inp + attn, ffn, hidden, experts)
            out.layers.append(parts)
        model.train()
        return out


class RolloutCapture:
    """The engine must have been started with PERFMODEL_ALIGN_DUMP_DIR=`dump_dir` for its layers to be dumped."""

    def __init__(self, engine: Any, dump_dir: Path) -> None:
        self.engine = engine
        self.dump_dir = Path(dump_dir)

    def forward(self, tokens: torch.Tensor) -> Forward:
        before = set(os.listdir(self.dump_dir))
        out = self.engine.engine.generate(input_ids=[tokens.tolist()], return_logprob=True, logprob_start_len=0,
                                          sampling_params={"max_new_tokens": 1, "temperature": 1.0})
        meta = (out[0] if isinstance(out, list) else out)["meta_info"]
        lps = [lp for lp, _tok, _txt in meta["input_token_logprobs"][1:]]
        result = Forward(log_probs=torch.tensor(lps, dtype=torch.float32))
        dumps = sorted(set(os.listdir(self.dump_dir)) - before)
        for name in dumps:
            if name.endswith(".tmp"):
                continue
            data = torch.load(self.dump_dir / name, weights_only=True)
            if torch.equal(data["input_ids"], tokens.to(data["input_ids"].dtype)):
                result.layers = [LayerParts(d["attention"], d["attention_streams"], d["ffn"], d["streams"],
                                            d.get("experts")) for d in data["layers"]]
        return result
