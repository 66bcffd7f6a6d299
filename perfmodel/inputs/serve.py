"""`kind: serve` validation cases: a published serving benchmark as it was run (docs/serving.md).

A serve case names the engine (its `stack`: sglang@0.5.9, vllm@0.15.1), the engine's shape (TP, EP, DP-attention),
precision and KV dtype, and the benchmark client: concurrency, request count, input and output lengths (fixed, or
drawn uniformly in [range_ratio x L, L] as InferenceMAX / InferenceX's `--random-range-ratio` does, with
ignore-eos). It is priced by the rollout's own engine model (perfmodel/sim/rollout.py, through `ServeCase.rl`, the
same engine section an RL run gives it); nothing about training is read.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from perfmodel.errors import InputError
from perfmodel.inputs.job import Precision, ResponseTokens, RLSpec, RolloutSpec
from perfmodel.inputs.measured import Measured
from perfmodel.inputs.run import HardwareOptions, ModelRef
from perfmodel.inputs.stack import StackOptions

SGLANG_SERVING_MEM_FRACTION = 0.88
"""SGLang's --mem-fraction-static when a benchmark does not state it: what SGLang's server arguments choose on
141-192 GB GPUs (H200, B200, MI300X, MI325X, MI355X); an assumption per case, said in its notes."""

LENGTH_POINTS = 32  # a uniform length range is drawn from at most this many evenly spaced lengths

SERVE_ENGINES = ("sglang", "vllm")
"""The engines a serve case may name as its stack: those whose profiles (stacks/sglang.yaml, stacks/vllm.yaml) state
the engine's own knobs. An unknown release of one falls back to its profile with a note (perfmodel/inputs/stack.py);
an unknown engine is the file's error, not a silent SGLang-like default."""

VLLM_ROCM_ATTENTION_NOTE = (
    "vLLM on ROCm without VLLM_ROCM_USE_AITER=1 runs Triton's unified attention (the 0.15.1 default), priced here "
    "as a flash kernel; its per-(query block, KV head) programs are slower than that at long context (llm-d's MI355X "
    "Llama-3.3-70B runs: TTFT 1.8x the priced at 16k inputs, 2.0x at 32k, 3.1x at 64k; TPOT 2.0x at 16k), so "
    "long-context TTFT and TPOT here are optimistic (studies/validation/serving/README.md, the attention kernel)")
"""Said with every vLLM prediction on AMD: a known cost the engine model does not price (docs/serving.md)."""


class ServeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engine_gpus: int = Field(..., ge=1, description="GPUs of one engine (server)")
    tp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    dp_attention: bool = False
    precision: Precision = Field("fp8", description="weights and GEMMs: fp8 (block-scaled) or bf16")
    kv_cache_dtype: Literal["bf16", "fp8"] | None = None
    mem_fraction_static: float = Field(SGLANG_SERVING_MEM_FRACTION, gt=0.0, lt=1.0)
    max_running_requests: int | None = Field(None, ge=1, description="the engine's cap (default: the engine's own)")
    max_total_tokens: int | None = Field(None, ge=1)
    chunked_prefill_tokens: int | None = Field(
        None, ge=1, description="prompt tokens per prefill forward (SGLang --chunked-prefill-size, vLLM "
        "--max-num-batched-tokens); default 8,192, both engines' default on large-memory GPUs")
    concurrency: int = Field(..., ge=1, description="requests the client keeps in flight (--max-concurrency)")
    requests: int = Field(..., ge=1, description="requests in the benchmark (--num-prompts)")
    input_tokens: int = Field(..., ge=1, description="input length (the top of the range with range_ratio < 1)")
    output_tokens: int = Field(..., ge=1, description="output length (the top of the range with range_ratio < 1)")
    range_ratio: float = Field(1.0, gt=0.0, le=1.0, description="lengths drawn uniformly in [ratio x L, L]")
    ignore_eos: bool = Field(True, description="every request generates its drawn output length")

    @field_validator("ignore_eos")
    @classmethod
    def _priced(cls, value: bool) -> bool:
        if not value:
            raise ValueError("false leaves the output lengths to the model, which the benchmark does not publish: "
                             "give ignore_eos: true with the measured mean output as output_tokens")
        return value

    def _range(self, top: int) -> list[int]:
        low = max(1, int(self.range_ratio * top))
        n = min(LENGTH_POINTS, top - low + 1)
        return sorted({round(low + (top - low) * i / max(1, n - 1)) for i in range(n)})

    @property
    def input_tokens_mean(self) -> float:
        lengths = self._range(self.input_tokens)
        return sum(lengths) / len(lengths)

    def output_lengths(self) -> ResponseTokens:
        lengths = self._range(self.output_tokens)
        return ResponseTokens(max=self.output_tokens, histogram=tuple((n, 1.0) for n in lengths))


class ServeRun(BaseModel):
    """One serving benchmark as it is run: the engine and its client (what `perfmodel simulate` prices)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["serve"]
    hardware: str = Field(..., min_length=1)
    hardware_options: HardwareOptions | None = None
    gpus: int = Field(..., ge=1, description="all GPUs serving (engines x engine_gpus)")
    model: ModelRef
    stack: str | None = Field(None, description="the engine: sglang[@version] or vllm[@version]")
    stack_options: StackOptions | None = None
    serve: ServeSpec

    @field_validator("stack")
    @classmethod
    def _known_engine(cls, value: str | None) -> str | None:
        engine = (value or "").strip().partition("@")[0]
        if engine and engine not in SERVE_ENGINES:
            raise ValueError(f"{engine!r} is not an engine the project prices; name one of "
                             f"{', '.join(e + '[@version]' for e in SERVE_ENGINES)}")
        return value

    @model_validator(mode="after")
    def _engines(self) -> ServeRun:
        if self.gpus % self.serve.engine_gpus:
            raise ValueError(f"gpus ({self.gpus}) must be a multiple of serve.engine_gpus ({self.serve.engine_gpus})")
        return self

    @property
    def rl(self) -> RLSpec:  # not cached: a model_copy(update=...) would keep a stale one
        """The engine section the rollout model reads: the benchmark's requests as one batch of prompts, sent
        `concurrency` at a time (perfmodel/sim/serving.py), nothing trained."""
        s = self.serve
        rollout = RolloutSpec(precision=s.precision, kv_cache_dtype=s.kv_cache_dtype, engine_gpus=s.engine_gpus,
                              tp=s.tp, ep=s.ep, dp=s.dp, dp_attention=s.dp_attention,
                              max_running_requests=s.max_running_requests,
                              mem_fraction_static=s.mem_fraction_static, max_total_tokens=s.max_total_tokens)
        return RLSpec(placement="colocated", actor_gpus=self.gpus, rollout_gpus=self.gpus, prompts_per_step=s.requests,
                      samples_per_prompt=1, prompt_tokens_mean=s.input_tokens_mean,
                      response_tokens=s.output_lengths(), rollout=rollout)


class ServeCase(ServeRun):
    """One serving benchmark and what it measured (the measured metrics of a validation case)."""

    id: str = Field(..., pattern=r"^[a-z0-9][a-z0-9.\-]*$", description="unique, kebab-case")
    source: str = Field(..., min_length=1)
    measured: Measured
    notes: str = ""


def serve_field(err: InputError) -> InputError:
    """An engine error named by its RL field (rl.rollout.tp), renamed to the serve case's field (serve.tp)."""
    field = err.field
    for old, new in (("rl.rollout.", "serve."), ("rl.rollout_gpus", "gpus"), ("rl.actor_gpus", "gpus"),
                     ("rl.", "serve.")):
        if field.startswith(old):
            return InputError(err.source, new + field[len(old):], err.message)
    return err
