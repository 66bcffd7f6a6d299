"""SGLang rollout simulator: `simulate_rollout(scn, seed=0) -> RolloutResult`.

What is modelled
----------------
* **Engines.** `rollout_gpus / engine_gpus` SGLang engines. Without DP-attention an engine of `tp x dp` GPUs is `dp`
  independent TP replicas (SGLang's DP controller starts one scheduler per replica), so the simulated unit - called
  an *engine* below and in the result - is one scheduler of `tp` GPUs. With DP-attention an engine of `tp` GPUs is
  one unit whose attention runs `dp` ways (`tp/dp` GPUs per attention rank) and whose MoE sees the whole batch.
* **Requests.** `prompts_per_step x samples_per_prompt`, every prompt `round(prompt_tokens_mean)` tokens (only the
  mean is given), response lengths drawn from `response_lengths()` (a heavy-tailed, truncated law; see there).
  Seeded and deterministic.
* **Client and router.** Miles sends requests through a semaphore of `sglang_server_concurrency x engines`
  (default 512 per engine, slime/miles `GenerateState`), so for RL batch sizes every request is sent at t = 0; the
  router places each request on an engine by round robin (default) or least outstanding requests. SGLang-router's
  cache-aware policy (samples of a prompt sticking to one engine) is not modelled.
* **Continuous batching.** Each engine admits waiting requests in FIFO order (SGLang PrefillAdder stops at the first
  request that does not fit) while it has fewer than `max_running_requests` running and their KV fits: the pool is
  `HBM x mem_fraction_static - weights` per GPU (SGLang `profile_max_num_token`), capped by `max_total_tokens`
  (logical tokens). A request reserves its *final* footprint (prompt + its actual response): SGLang reserves an
  estimate (`new_token_ratio`) and retracts requests when the pool overflows; retraction and its recompute are NOT
  modelled, so admission against the true final footprint stands for "the pool is kept full, nothing is retracted".
  `RolloutParams.kv_admission = "max"` reserves prompt + max response instead (SGLang with conservativeness 1 and no
  ratio decay). Requests that do not fit wait (back-pressure).
* **Prefill.** Admitted requests are prefilled together (chunks of `chunked_prefill_tokens`), pausing decode, as
  SGLang does without mixed chunking. The prefill emits the first response token. Cost: GEMM FLOPs at the rollout
  precision (FP8 / BF16) and the weights read once, attention FLOPs (causal, DSV4 sliding window + compressed
  entries), TP all-reduce / EP all-to-all per layer, a kernel floor per kernel.
* **Decode step.** Per GPU, summed over sequential kernel groups, each a roofline `max(bytes / HBM, FLOPs / peak)`:
  dense weights (attention projections, shared experts, router, LM head, mHC), routed-expert weights of the experts
  the live batch hits - per MoE layer `E (1 - (1 - k/E)^B)` distinct experts for B tokens routing top-k of E -, the
  KV read (per request and layer: DSV4 sliding window of 128 raw tokens, C4 top-512 of ctx/4 entries + indexer keys
  of ctx/4, C128 ctx/128 entries; MLA latent; GQA heads), a TP all-reduce per layer (attention output; MoE output
  without DP-attention, SGLang's EP MoE) or EP dispatch + combine all-to-all per MoE layer (DP-attention / DeepEP),
  and a fixed per-step kernel floor (kernels per layer x layers x `kernel_floor_s`).
* **Speed.** Between two changes of an engine's batch (a request finishing or admitted, or a KV term saturating,
  e.g. a C4 layer reaching its top-512 cap) every decode step has the same batch, and the KV term grows linearly, so
  a whole segment of `n` steps costs `n (base(B) + A) + beta n (n - 1) / 2` in closed form. One simpy timeout per
  segment: the event count grows with requests (about 2 per request), not with tokens.

Not modelled. Would lengthen the rollout: retraction, CUDA-graph batch caps (batches above `cuda_graph_max_bs` run
eager), reward computation and Miles' own overhead between requests, R3 routing-replay copies, deterministic-mode
kernels, stragglers, load imbalance between experts (the hit formula assumes uniform routing) and between
DP-attention ranks (balanced). Would shorten it: speculative decoding (MTP/EAGLE), radix-cache prefix sharing
between the samples of a prompt (prefill is counted per sample; Miles disables the radix cache in the AMD
recipes).

Costs come from `perfmodel.cost.serve.engine` (per-GPU prefill, decode, KV reads, engine collectives; weights per
GPU and the KV footprint from `perfmodel.cost.memory.rollout`), the response lengths from
`perfmodel.sim.response_law`; this module runs the engines and the router over time. Decode GEMMs use the profile's
large-GEMM efficiency (`max_efficiency`) rather than the saturating curve, because the fixed cost of every kernel is
charged once, explicitly, by the per-step kernel floor.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
import simpy

from perfmodel.cost.serve.engine import EngineCost, RolloutParams, rl_section, rollout_params_for
from perfmodel.errors import InputError
from perfmodel.inputs.scenario import Scenario
from perfmodel.sim.response_law import response_law, response_lengths
from perfmodel.sim.rollout_result import RolloutResult, TimelineSegment, straggler_fraction

# ---------------------------------------------------------------------------------------------------------------
# Simulation


class _CountingEnv(simpy.Environment):
    """simpy Environment that counts processed events (the benchmark metric)."""

    def __init__(self) -> None:
        super().__init__()
        self.n_events = 0

    def step(self) -> None:
        self.n_events += 1
        super().step()


_FINISH, _BREAK = 0, 1


class _Engine:
    """One SGLang scheduler: waiting queue, running batch, decode-step clock, segment-wise advance."""

    def __init__(self, sim: _Rollout, idx: int) -> None:
        self.sim, self.idx = sim, idx
        self.waiting: deque[int] = deque()
        self.running: set[int] = set()
        self.heap: list[tuple[int, int, int, int, float]] = []
        self.step = 0  # decode steps executed
        self.attn = 0.0  # sum of per-request KV-term cost at the current step
        self.beta = 0.0  # its growth per step
        self.tok_reserved = 0.0
        self.kv_reserved = 0.0
        self.busy_prefill = 0.0
        self.busy_decode = 0.0
        self.last_finish = 0.0
        self.max_batch = 0
        self.curve: list[tuple[float, int]] = [(0.0, 0)]
        self.timeline: list[TimelineSegment] = []
        self.wake: simpy.Event | None = None
        self.seq = 0
        self.segments = 0

    # -- admission --------------------------------------------------------------------------------------------
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def _admit(self) -> list[int]:
        sim, cost = self.sim, self.sim.cost
        out: list[int] = []
        while self.waiting:
            r = self.waiting[0]
            if len(self.running) + len(out) >= cost.max_running:
                break
            tok, kv = sim.res_tokens[r], sim.res_bytes[r]
            if self.tok_reserved + tok > cost.max_total_tokens or self.kv_reserved + kv > cost.kv_pool_bytes:
                if not self.running and not out:
                    sim.unfit(r)
                break
            self.waiting.popleft()
            self.tok_reserved += tok
            self.kv_reserved += kv
            out.append(r)
        return out

    def _start(self, r: int) -> None:
        """Request `r` finished its prefill (one response token out) and joins the decode batch at `self.step`."""
        sim = self.sim
        L = int(sim.lengths[r])
        if L <= 1:
            self._finish(r, count_attn=False)
            return
        s0 = self.step
        fin = s0 + L - 1
        f0, slope, finite, unbounded = sim.kv_profile(sim.prompts[r] + 1.0)
        # (step at which a term stops growing, its slope, whether a break event removes the slope before the end)
        bps: list[tuple[int, float, bool]] = [(fin, unbounded, False)] if unbounded else []
        heap = self.heap
        for off, sl in finite:
            bp = s0 + off
            if bp < fin:
                bps.append((bp, sl, True))
                self.seq += 1
                heapq.heappush(heap, (bp, self.seq, _BREAK, r, sl))
            else:
                bps.append((fin, sl, False))
        sim.req_state[r] = (s0, f0, bps)
        self.attn += f0
        self.beta += slope
        self.running.add(r)
        self.seq += 1
        heapq.heappush(heap, (fin, self.seq, _FINISH, r, 0.0))

    def _finish(self, r: int, count_attn: bool = True) -> None:
        sim = self.sim
        if count_attn:
            s0, f0, bps = sim.req_state[r]
            val, sl_left = f0, 0.0
            for bp, sl, early in bps:  # bp <= self.step: a request finishes at or after each of its bps
                val += sl * (bp - s0)
                if not early:
                    sl_left += sl
            self.attn -= val
            self.beta -= sl_left
            self.running.discard(r)
        self.tok_reserved -= sim.res_tokens[r]
        self.kv_reserved -= sim.res_bytes[r]
        self.last_finish = sim.finish_s[r] = sim.env.now
        sim.on_finish(self)

    def _record_batch(self) -> None:
        b = len(self.running)
        if b != self.curve[-1][1]:
            self.curve.append((self.sim.env.now, b))
        if b > self.max_batch:
            self.max_batch = b
        if b == 0:
            self.attn = self.beta = 0.0  # drop float residue

    # -- process ---------------------------------------------------------------------------------------------
    def run(self):
        # simpy re-creates an exception escaping a process from its args, which InputError does not survive: keep
        # it on the simulation and raise it once the event loop has stopped.
        try:
            yield from self._run()
        except InputError as err:
            self.sim.error = err

    def _run(self):
        sim, cost, env = self.sim, self.sim.cost, self.sim.env
        while True:
            admitted = self._admit()
            if admitted:
                t0 = env.now
                dt = cost.prefill_s([sim.prompts[r] for r in admitted])
                yield env.timeout(dt)
                self.busy_prefill += dt
                self.timeline.append(TimelineSegment(self.idx, t0, env.now, len(admitted), "prefill"))
                sim.first_tokens(admitted, t0, dt)
                for r in admitted:
                    self._start(r)
                self._record_batch()
                continue
            if not self.running:
                if sim.pending_total() == 0 and not self.waiting:
                    return
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            b = len(self.running)
            n = self.heap[0][0] - self.step
            base = cost.decode_base(b) + self.attn
            beta = self.beta
            dt = n * base + beta * n * (n - 1) * 0.5
            t0 = env.now
            if sim.pending:  # a request may still arrive mid-segment: allow a wake-up
                self.wake = env.event()
                yield env.timeout(dt) | self.wake
                woke = self.wake.triggered and env.now - t0 < dt
                self.wake = None
                if woke:
                    e = env.now - t0
                    # whole steps done by now: largest k with k*base + beta*k*(k-1)/2 <= e; the one in flight ends
                    if beta > 0:
                        a2, b1 = 0.5 * beta, base - 0.5 * beta
                        k = int((-b1 + math.sqrt(b1 * b1 + 4 * a2 * e)) / (2 * a2))
                    else:
                        k = int(e / base) if base > 0 else n
                    k = min(n, k + 1)
                    end = k * base + beta * k * (k - 1) * 0.5
                    if end > e:
                        yield env.timeout(end - e)
                    n, dt = k, end
            else:
                yield env.timeout(dt)
            self.busy_decode += dt
            self.segments += 1
            tl = self.timeline
            if tl and tl[-1].kind == "decode" and tl[-1].batch == b and tl[-1].end_s == t0:
                tl[-1] = TimelineSegment(self.idx, tl[-1].start_s, env.now, b, "decode")
            else:
                tl.append(TimelineSegment(self.idx, t0, env.now, b, "decode"))
            self.attn += beta * n
            self.step += n
            heap = self.heap
            while heap and heap[0][0] == self.step:
                _, _, kind, r, sl = heapq.heappop(heap)
                if kind == _FINISH:
                    self._finish(r)
                else:
                    self.beta -= sl
            self._record_batch()


class _Rollout:
    def __init__(self, scn: Scenario, seed: int, params: RolloutParams) -> None:
        rl = rl_section(scn)
        self.scn, self.params = scn, params
        self.cost = cost = EngineCost(scn, params)
        g = cost.geo
        n = rl.responses_per_step * rl.steps_in_flight  # an off-policy window: its steps' requests all in flight
        self.law = response_law(rl.response_tokens, params.response_sigma)
        self.lengths = response_lengths(rl.response_tokens, n, seed, params.response_sigma)
        p = max(1, int(round(rl.prompt_tokens_mean)))
        self.prompts = [p] * n
        final = (self.lengths + p) if params.kv_admission == "actual" else np.full(n, p + rl.response_tokens.max)
        self.res_tokens = final.astype(float).tolist()
        self.res_bytes = (cost.kv_bytes_per_request_fixed + cost.kv_bytes_per_token * final).tolist()
        self._profiles: dict[float, tuple] = {}
        self.req_state: list = [None] * n
        self.env = _CountingEnv()
        self.engines = [_Engine(self, i) for i in range(g.n_units)]
        self.pending: deque[int] = deque(range(n))  # not yet sent by the client (prompt-major order)
        self.slots = params.client_concurrency or max(1, params.client_concurrency_per_engine * g.n_engines)
        # per request: sent by the client, first token out (end of its prefill), last token out
        self.sent_s, self.first_token_s, self.finish_s = np.zeros(n), np.zeros(n), np.zeros(n)
        self.rr = 0
        self.error: InputError | None = None

    def kv_profile(self, c0: float) -> tuple[float, float, tuple[tuple[int, float], ...], float]:
        """KV-term profile of a request entering decode at context c0: its cost f0, its total growth per step,
        the (steps until saturation, slope) of each capped term still growing, and the slope of unbounded terms."""
        prof = self._profiles.get(c0)
        if prof is None:
            f0 = slope = unbounded = 0.0
            finite: list[tuple[int, float]] = []
            for comp in self.cost.components:
                f0 += comp.time_s * min(c0 / comp.ratio, comp.cap)
                if c0 < comp.ratio * comp.cap:
                    sl = comp.time_s / comp.ratio
                    slope += sl
                    if math.isinf(comp.cap):
                        unbounded += sl
                    else:
                        finite.append((math.ceil(comp.ratio * comp.cap - c0), sl))
            prof = self._profiles[c0] = (f0, slope, tuple(finite), unbounded)
        return prof

    def first_tokens(self, admitted: list[int], t0: float, dt: float) -> None:
        """A request's first token comes out with the prefill chunk that ends its prompt (the prefill's time
        apportioned by tokens); decode resumes once every admitted prompt is in."""
        chunk, total, done = self.params.chunked_prefill_tokens, sum(self.prompts[r] for r in admitted), 0
        for r in admitted:
            done += self.prompts[r]
            self.first_token_s[r] = t0 + dt * min(total, -(-done // chunk) * chunk) / total

    def pending_total(self) -> int:
        return len(self.pending)

    def unfit(self, r: int) -> None:
        c = self.cost
        raise InputError("", "rl.rollout.max_total_tokens",
                         f"one request of {self.res_tokens[r]:.0f} tokens ({self.res_bytes[r] / 2**20:.1f} MiB of KV "
                         f"per GPU) cannot fit an empty engine (max_total_tokens {c.max_total_tokens}, KV pool "
                         f"{c.kv_pool_bytes / 2**30:.2f} GiB); SGLang would reject it")

    def _route(self) -> _Engine:
        es = self.engines
        if self.params.router == "least_loaded":
            return min(es, key=lambda e: (e.outstanding(), e.idx))
        e = es[self.rr % len(es)]
        self.rr += 1
        return e

    def dispatch(self) -> None:
        while self.pending and self.slots > 0:
            r = self.pending.popleft()
            self.sent_s[r] = self.env.now
            self.slots -= 1
            e = self._route()
            e.waiting.append(r)
            if e.wake is not None and not e.wake.triggered:
                e.wake.succeed()

    def on_finish(self, engine: _Engine) -> None:
        self.slots += 1
        if self.pending:
            self.dispatch()

    def run(self) -> None:
        self.dispatch()
        for e in self.engines:
            self.env.process(e.run())
        self.env.run()
        if self.error is not None:
            raise self.error


def run_requests(scn: Scenario, seed: int, params: RolloutParams) -> _Rollout:
    """The engines and the client run over every request of the scenario's engine section, to the last token: the
    simulation's state, per-request times included (`sent_s`, `first_token_s`, `finish_s`)."""
    sim = _Rollout(scn, seed, params)
    sim.run()
    return sim


def simulate_rollout(scn: Scenario, seed: int = 0, params: RolloutParams | None = None) -> RolloutResult:
    """Simulate one RL step's rollout (all prompts x samples of the step) on the rollout engines. With
    `rl.off_policy_steps` k > 1 (async) the engines hold k steps' requests at once, as NeMo-RL's trajectory collector
    keeps k steps' prompt groups in flight: the window of k steps is simulated and one step is its k-th part (its
    time, busy time, idle tail and tokens; the timeline and batch curves its first k-th, where the engines run
    full), so a batch's long responses overlap the next batches' instead of idling the engines at each step's end."""
    params = params or rollout_params_for(scn)
    sim = run_requests(scn, seed, params)
    rl = rl_section(scn)
    k = rl.steps_in_flight
    es = sim.engines
    end = max((e.last_finish for e in es), default=0.0)
    step_end = end / k
    g = sim.cost.geo
    tokens = int(sim.lengths.sum())
    notes = [f"response lengths: {sim.law.note} (mean {sim.law.mean:.0f}, {sim.law.truncated_fraction:.0%} at the "
             f"cap {rl.response_tokens.max})",
             "not modelled: retraction, speculative decoding, CUDA-graph batch caps, radix prefix sharing, "
             "reward and Miles overhead"]
    if k > 1:
        notes.append(f"{k} steps' requests in flight ({len(sim.lengths):,}): a step is the window's {end:.1f} s / {k}")
    curves = tuple(tuple((t, b) for t, b in e.curve if k == 1 or t <= step_end) for e in es)
    return RolloutResult(
        rollout_time_s=step_end,
        tokens_generated=tokens // k,
        prompt_tokens=int(sum(sim.prompts)) // k,
        tokens_per_s_per_gpu=tokens / end / rl.rollout_gpus if end > 0 else 0.0,
        rollout_gpus=rl.rollout_gpus,
        num_engines=g.n_units,
        engine_gpus=g.unit_gpus,
        engine_busy_s=tuple((e.busy_prefill + e.busy_decode) / k for e in es),
        engine_last_finish_s=tuple(e.last_finish / k for e in es),
        engine_decode_steps=tuple(e.step // k for e in es),
        engine_max_batch=tuple(e.max_batch for e in es),
        batch_curves=curves,
        straggler_fraction=straggler_fraction(curves, step_end),
        idle_tail_gpu_s=sum((end - e.last_finish) * g.unit_gpus for e in es) / k,
        prefill_time_s=sum(e.busy_prefill for e in es) / k,
        decode_time_s=sum(e.busy_decode for e in es) / k,
        timeline=tuple(s._replace(end_s=min(s.end_s, step_end)) for e in es for s in e.timeline
                       if k == 1 or s.start_s < step_end),
        response_lengths=tuple(int(x) for x in sim.lengths[:rl.responses_per_step]),
        law=sim.law,
        kv_pool_bytes_per_gpu=sim.cost.kv_pool_bytes / g.attn_dp,
        weights_bytes_per_gpu=sim.cost.weights_bytes_per_gpu,
        max_running_requests=sim.cost.max_running,
        sim_events=sim.env.n_events,
        decode_segments=sum(e.segments for e in es),
        notes=tuple(notes),
    )
