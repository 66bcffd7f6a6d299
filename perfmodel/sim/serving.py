"""A serving benchmark on the rollout's engine model: `simulate_serving(scn) -> ServeResult`.

The same engines, batching, prefill and decode costs as an RL rollout (perfmodel/sim/rollout.py, one model); what a
benchmark adds is its client: `concurrency` requests in flight, the next one sent when one finishes
(`--max-concurrency` of SGLang's / vLLM's bench_serving), over `requests` requests. Its figures as bench_serving
computes them: throughput over the benchmark's duration (first request sent to last token out), TTFT per request
(sent to first token), TPOT per request ((last token - first token) / (output tokens - 1)), median and mean over
the requests. What is not modelled (speculative decoding, warm-up requests, ...): docs/serving.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from perfmodel.cost.serve.engine import EngineCost, RolloutParams, engine_geometry, rollout_params_for
from perfmodel.errors import InputError
from perfmodel.inputs.job import engine_layout
from perfmodel.inputs.scenario import Scenario
from perfmodel.inputs.serve import serve_field
from perfmodel.invariants import PhysicsError
from perfmodel.sim.rollout import run_requests


@dataclass(frozen=True, slots=True)
class ServeResult:
    scenario: Scenario
    duration_s: float
    requests: int
    input_tokens: int
    output_tokens: int
    gpus: int
    ttft_s: tuple[float, ...]  # per request
    tpot_s: tuple[float, ...]  # per request with more than one output token

    def __post_init__(self) -> None:
        where = f"serving {self.requests} requests on {self.gpus} GPUs"
        if self.duration_s <= 0:
            raise PhysicsError("a benchmark takes time", where, f"duration {self.duration_s} s")
        if min(self.ttft_s, default=0.0) < 0 or min(self.tpot_s, default=1.0) <= 0:
            raise PhysicsError("TTFT >= 0 and TPOT > 0", where, f"min TTFT {min(self.ttft_s)} s, min TPOT "
                               f"{min(self.tpot_s, default=float('nan'))} s")

    def metrics(self) -> dict[str, float]:
        ttft_ms, tpot_ms = np.array(self.ttft_s) * 1e3, np.array(self.tpot_s) * 1e3
        out = {"output_tokens_per_s_per_gpu": self.output_tokens / self.duration_s / self.gpus,
               "total_tokens_per_s_per_gpu": (self.input_tokens + self.output_tokens) / self.duration_s / self.gpus,
               "ttft_median_ms": float(np.median(ttft_ms)), "ttft_mean_ms": float(ttft_ms.mean())}
        if len(tpot_ms):
            out |= {"tpot_median_ms": float(np.median(tpot_ms)), "tpot_mean_ms": float(tpot_ms.mean())}
        return out

    def decode_step(self) -> tuple[int, float, dict[str, float]]:
        """One scheduler's decode step at the client's concurrency spread over the schedulers (capped at the
        engine's running limit), every request at its mean context (input + half its output): (batch, context
        tokens, the step's parts in seconds: cost/serve/engine.py step_breakdown). Where a decode step goes; the
        simulated benchmark's TPOT also carries prefill chunks, ramps and tails."""
        serve = self.scenario.run.serve
        cost = EngineCost(self.scenario)
        units = engine_geometry(self.scenario).n_units
        batch = max(1, min(-(-serve.concurrency // units), int(min(cost.max_running, serve.requests))))
        ctx = self.input_tokens / self.requests + self.output_tokens / self.requests / 2.0
        return batch, ctx, cost.step_breakdown(batch, ctx)

    def to_json(self) -> dict:
        scn, serve = self.scenario, self.scenario.run.serve
        g = engine_geometry(scn)
        batch, ctx, parts = self.decode_step()
        return {
            "kind": "serve", "model": scn.model.id or scn.model.family, "hardware": scn.hardware.id, "gpus": self.gpus,
            "stack": scn.stack.id, "stack_notes": list(scn.stack.notes), "engines": g.n_engines,
            "engine_gpus": serve.engine_gpus,
            "engine_layout": engine_layout(serve.tp, serve.ep, serve.dp, serve.dp_attention),
            "concurrency": serve.concurrency, "requests": self.requests,
            "metrics": self.metrics(), "duration_s": self.duration_s,
            "decode_step": {"batch": batch, "context_tokens": ctx,
                            "parts_ms": {k.removesuffix("_s"): v * 1e3 for k, v in parts.items() if k.endswith("_s")},
                            "experts_hit_per_layer": parts.get("experts_hit_per_layer", 0.0)},
        }


def serve_params(scn: Scenario) -> RolloutParams:
    """A serving benchmark's engine parameters: the stack's, the client's concurrency, and the engine's prefill chunk
    where the case states it."""
    serve = scn.run.serve
    params = dataclasses.replace(rollout_params_for(scn), client_concurrency=serve.concurrency)
    if serve.chunked_prefill_tokens:
        params = dataclasses.replace(params, chunked_prefill_tokens=serve.chunked_prefill_tokens)
    return params


def simulate_serving(scn: Scenario, seed: int = 0) -> ServeResult:
    params = serve_params(scn)
    try:
        sim = run_requests(scn, seed, params)
    except InputError as err:  # named by the engine section's RL field: the serve case's
        raise serve_field(err) from None
    lengths = np.asarray(sim.lengths)
    many = lengths > 1
    tpot = (sim.finish_s[many] - sim.first_token_s[many]) / (lengths[many] - 1)
    return ServeResult(scn, float(sim.finish_s.max()), len(lengths), int(sum(sim.prompts)), int(lengths.sum()),
                       scn.run.gpus, tuple((sim.first_token_s - sim.sent_s).tolist()), tuple(tpot.tolist()))
