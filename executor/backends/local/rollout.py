"""Rollout with a real SGLang `Engine` (in-process API) serving the HF checkpoint the executor wrote.

The KV pool is always bounded (`max_total_tokens`), generation samples at the plan's temperature and returns
the sampled tokens' log-probs (`rollout_log_probs`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from executor.backends.local.cpu_shims import needs_cpu_shims
from executor.backends.local.engine_processes import engine_environment, sglang_engine_class, start_method
from executor.backends.local.tokenizer import EOS_ID, decode


@dataclass
class Generation:
    response_ids: list[int]
    response_text: str
    log_probs: torch.Tensor  # fp32 [len(response_ids)]
    finish_reason: str


class RolloutEngine:
    def __init__(self, model_path: Path, max_total_tokens: int, max_running_requests: int | None, seed: int,
                 mem_fraction_static: float = 0.3, log_level: str = "warning") -> None:
        t0 = time.perf_counter()
        kwargs: dict[str, Any] = dict(
            model_path=str(model_path), dtype="bfloat16", max_total_tokens=max_total_tokens, random_seed=seed,
            log_level=log_level, disable_radix_cache=True, skip_tokenizer_init=False,
            sleep_on_idle=True,  # the scheduler otherwise busy-polls a core while the trainer works
        )
        if needs_cpu_shims():
            kwargs["device"] = "cpu"
        else:  # colocated with the trainer on the same GPU
            kwargs["mem_fraction_static"] = mem_fraction_static
        if max_running_requests:
            kwargs["max_running_requests"] = max_running_requests
        architecture = (json.loads((Path(model_path) / "config.json").read_text()).get("architectures") or [""])[0]
        self.start_method = start_method(architecture)  # its processes forked from a forkserver, or spawned
        with engine_environment(architecture):
            self.engine = sglang_engine_class(architecture)(**kwargs)
        self.start_s = time.perf_counter() - t0

    def generate(self, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float) -> list[Generation]:
        params = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": 1.0, "top_k": -1,
                  "stop_token_ids": [EOS_ID]}
        outs = self.engine.generate(input_ids=prompt_ids, sampling_params=params, return_logprob=True)
        gens = []
        for out in outs:
            ids = list(out["output_ids"])
            lps = [lp for lp, _tok, _txt in out["meta_info"]["output_token_logprobs"]]
            finish = out["meta_info"].get("finish_reason") or {}
            gens.append(Generation(ids, decode(ids), torch.tensor(lps, dtype=torch.float32),
                                   str(finish.get("type", "")) if isinstance(finish, dict) else str(finish)))
        return gens

    def freeze_gc(self) -> None:
        """Freeze the GC of the engine's processes (scheduler, tokenizer manager) after a warm-up."""
        self.engine.freeze_gc()

    def update_weights_from_tensor(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        self.engine.begin_weight_update()
        ok, message = self.engine.update_weights_from_tensor(named_tensors, flush_cache=True)
        self.engine.end_weight_update()
        if not ok:
            raise RuntimeError(f"SGLang refused the weight update: {message}")

    def update_weights_from_disk(self, path: Path) -> None:
        self.engine.begin_weight_update()
        result = self.engine.update_weights_from_disk(str(path))
        self.engine.end_weight_update()
        ok = result[0] if isinstance(result, tuple) else getattr(result, "success", True)
        if not ok:
            raise RuntimeError(f"SGLang refused the weight update from disk: {result}")

    def shutdown(self) -> None:
        self.engine.shutdown()
