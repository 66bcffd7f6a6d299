"""Read Miles' per-step timings back out of its job log.

Where the lines come from (radixark/miles, snapshot 31f1ca961, and the PR #1300 commit a8684732f):

- `miles/utils/train_metric_utils.py::log_perf_data_raw` (training side, once per rollout on the primary rank):
  ``logger.info(f"perf {rollout_id}: {log_dict}")`` where ``log_dict`` is ``{f"perf/{timer}_time": seconds}``
  for every `miles.utils.timer.Timer` that ran since the last call (`log_probs`, `ref_log_probs`, `actor_train`,
  `train`, `train_wait`, `data_preprocess`, `update_weights`, `sleep`, `wake_up`, ...) plus the derived
  `perf/actor_train_tflops`, `perf/actor_train_tok_per_s`, `perf/actor_train_mfu`, `perf/step_time`
  (= train_wait + train) and `perf/wait_time_ratio`.
- `miles/ray/rollout/metrics.py::log_rollout_data` (rollout manager, once per rollout):
  ``logger.info(f"perf {rollout_id}: {log_dict}")`` with `perf/rollout_time`, `perf/tokens_per_gpu_per_sec`,
  `perf/longest_sample_tokens_per_sec`, ... and `rollout/response_len/mean`, `rollout/truncated_ratio`, ...
- `miles/backends/megatron_utils/model.py` (per optimizer step): ``logger.info(f"{role_tag}step {step}: {log_dict}")``
  with `train/*` keys such as `train/train_rollout_logprob_abs_diff`.

The logger format is ``[%(asctime)s.%(msecs)03d {name}] %(filename)s:%(lineno)d - %(message)s``
(`miles/utils/logging_utils.py::configure_logger_raw`), and Ray prefixes worker output with
``(ActorName pid=..., ip=...)`` in ANSI colour, sometimes with a `` [repeated Nx across cluster]`` tail. So a line
as the job log shows it looks like::

    (MegatronTrainRayActor pid=4121) [2026-07-08 10:01:02.123 actor] train_metric_utils.py:56 - perf 3: \
{'perf/actor_train_time': 100.4, ...}

The `update_weights` timer ends after training, so the `perf/update_weights_time` in rollout N's training-side dict
is the weight update that *preceded* step N's training (for N = 0: the initial sync before the loop). That is one
update per step, which is what a per-step record needs.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# `perf 3: {...}`, `eval 3: {...}`, `step 7: {...}`, `critic-step 7: {...}`; the dict runs to the end of the line.
_METRIC_LINE = re.compile(r"(?:^|[\s\-:\]])(?P<tag>perf|eval|step|[A-Za-z_]+-step) (?P<id>\d+): (?P<body>\{.*\})\s*$")

# Keys written on the training side (any one of them marks the training half of a step as seen).
TRAIN_SIDE_KEYS = (
    "perf/actor_train_time",
    "perf/train_time",
    "perf/log_probs_time",
    "perf/train_wait_time",
    "perf/step_time",
)
ROLLOUT_SIDE_KEYS = ("perf/rollout_time",)


@dataclass(frozen=True, slots=True)
class MetricLine:
    """One parsed `<tag> <id>: {...}` line."""

    tag: str  # perf | eval | step | critic-step ...
    index: int  # rollout id (perf/eval) or accumulated optimizer step (step)
    metrics: dict[str, float]


class _SafeEval:
    """Evaluate the repr of a metrics dict without `eval`: literals, nan/inf, and wrappers like
    `np.float64(1.5)` or `tensor(0.5, device='cuda:0')` (reduced to their first argument)."""

    _NAMES = {"nan": math.nan, "inf": math.inf, "True": True, "False": False, "None": None}

    def __call__(self, text: str) -> Any:
        return self._node(ast.parse(text, mode="eval").body)

    def _node(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:  # `**x` cannot appear in a repr
                    raise ValueError("dict unpacking")
                out[self._node(k)] = self._node(v)
            return out
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [self._node(e) for e in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = self._node(node.operand)
            if not isinstance(v, (int, float)):
                raise ValueError("sign on a non-number")
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Name):
            if node.id in self._NAMES:
                return self._NAMES[node.id]
            raise ValueError(f"name {node.id}")
        if isinstance(node, ast.Attribute):  # `np.nan`, `math.inf`
            if node.attr in ("nan", "inf"):
                return self._NAMES[node.attr]
            raise ValueError(f"attribute {node.attr}")
        if isinstance(node, ast.Call) and node.args:
            return self._node(node.args[0])
        raise ValueError(type(node).__name__)


_safe_eval = _SafeEval()
_PAIR = re.compile(
    r"'(?P<key>[^'\\]+)'\s*:\s*(?:[A-Za-z_][\w.]*\()?(?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf))")


def _numbers(d: dict[Any, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        out[str(k)] = float(v)
    return out


def _parse_body(body: str) -> dict[str, float] | None:
    try:
        value = _safe_eval(body)
    except (SyntaxError, ValueError, RecursionError, KeyError, TypeError):
        value = None
    if isinstance(value, dict):
        return _numbers(value)
    # A repr we do not understand (an object repr, a truncated line): keep the plain `'key': number` pairs.
    pairs = {m["key"]: float(m["num"]) for m in _PAIR.finditer(body)}
    return pairs or None


def clean_line(line: str) -> str:
    """Strip ANSI colour codes and Ray's dedup tail."""
    return _REPEATED.sub("", _ANSI.sub("", line)).rstrip("\r\n")


def parse_metric_line(line: str) -> MetricLine | None:
    """The `perf N: {...}` (or `eval`/`step`) payload of one log line, or None."""
    text = clean_line(line)
    if ": {" not in text:
        return None
    m = _METRIC_LINE.search(text)
    if m is None:
        return None
    metrics = _parse_body(m["body"])
    if metrics is None:
        return None
    return MetricLine(m["tag"], int(m["id"]), metrics)


# Miles perf key -> measurement name (the names of perfmodel.inputs.case.Measured where one exists).
_DIRECT = {
    "perf/rollout_time": "rollout_time_s",
    "perf/actor_train_time": "train_time_s",
    "perf/step_time": "step_time_s",
    "perf/train_time": "train_phase_time_s",
    "perf/train_wait_time": "train_wait_time_s",
    "perf/ref_log_probs_time": "ref_log_probs_time_s",
    "perf/update_weights_time": "update_weights_time_s",
    "perf/tokens_per_gpu_per_sec": "rollout_tokens_per_gpu_s",
    "perf/actor_train_tok_per_s": "train_tokens_per_s",
    "perf/actor_train_tflops": "tflops_per_gpu",
    "perf/actor_train_mfu": "mfu",
    "perf/wait_time_ratio": "wait_time_ratio",
    "rollout/response_len/mean": "response_len_mean",
    "rollout/truncated_ratio": "truncated_ratio",
}


def _measured(perf: dict[str, float], key: str) -> bool:
    """A figure worth keeping: present, finite and not negative (every perf figure read is a time, a rate or a
    ratio; a damaged line can carry `-177.15`)."""
    return key in perf and math.isfinite(perf[key]) and perf[key] >= 0


@dataclass(slots=True)
class StepRecord:
    """Everything seen for one rollout id."""

    step: int
    perf: dict[str, float] = field(default_factory=dict)
    train_metrics: list[dict[str, float]] = field(default_factory=list)  # the `step N:` dicts of this rollout
    rollout_only: bool = False  # a --debug-rollout-only run: no training side to wait for

    @property
    def has_train(self) -> bool:
        return any(k in self.perf for k in TRAIN_SIDE_KEYS)

    @property
    def has_rollout(self) -> bool:
        return any(k in self.perf for k in ROLLOUT_SIDE_KEYS)

    @property
    def complete(self) -> bool:
        return self.has_rollout and (self.rollout_only or self.has_train)

    @property
    def kept(self) -> bool:
        """Worth recording when the log ends: a training-side line seen (a run whose rollout logging is customised
        never logs `perf/rollout_time`), or the rollout of a rollout-only run."""
        return self.has_rollout if self.rollout_only else self.has_train

    def measurement(self) -> dict[str, Any]:
        """A flat per-step measurement dict: `step`, the `*_s` timings, throughputs, and `perf` (all raw keys).

        - log_probs_time_s: `perf/log_probs_time` + `perf/ref_log_probs_time` (all log-prob passes; the ref pass is
          also reported alone as ref_log_probs_time_s).
        - train_time_s: `perf/actor_train_time` (forward + backward + optimizer of the actor).
        - weight_update_time_s: `perf/update_weights_time` + `perf/sleep_time` + `perf/wake_up_time` (colocated runs
          offload the trainer around the update; disaggregated runs have no sleep/wake timers).
        - step_time_s: `perf/step_time` (= train_wait + train: the period between two training steps).
        """
        p = self.perf
        out: dict[str, Any] = {"step": self.step}
        for key, name in _DIRECT.items():
            if _measured(p, key):
                out[name] = p[key]
        lp = [p[k] for k in ("perf/log_probs_time", "perf/ref_log_probs_time") if _measured(p, k)]
        if lp:
            out["log_probs_time_s"] = sum(lp)
        wu = [p[k] for k in ("perf/update_weights_time", "perf/sleep_time", "perf/wake_up_time") if _measured(p, k)]
        if wu:
            out["weight_update_time_s"] = sum(wu)
        diffs = [d["train/train_rollout_logprob_abs_diff"] for d in self.train_metrics
                 if "train/train_rollout_logprob_abs_diff" in d]
        if diffs:
            out["train_rollout_logprob_abs_diff"] = sum(diffs) / len(diffs)
        kls = [d["train/train_rollout_kl"] for d in self.train_metrics if "train/train_rollout_kl" in d]
        if kls:
            out["train_rollout_kl"] = sum(kls) / len(kls)
        out["complete"] = self.complete
        out["perf"] = dict(p)
        return out


class MilesLogParser:
    """Feed job-log text (whole lines or arbitrary chunks); collect one record per rollout id.

    `feed` returns the measurements of steps that became complete (both the rollout-side and the training-side
    `perf` line seen; the rollout-side one alone for `rollout_only`, a --debug-rollout-only run) with that call,
    so a caller can store them while the job runs; `finish` returns the rest worth recording (`StepRecord.kept`).
    """

    def __init__(self, num_steps_per_rollout: int = 1, rollout_only: bool = False) -> None:
        self.num_steps_per_rollout = max(1, num_steps_per_rollout)
        self.rollout_only = rollout_only
        self.steps: dict[int, StepRecord] = {}
        self.eval: dict[int, dict[str, float]] = {}
        self._emitted: set[int] = set()
        self._partial = ""

    def _record(self, step: int) -> StepRecord:
        rec = self.steps.get(step)
        if rec is None:
            rec = self.steps[step] = StepRecord(step, rollout_only=self.rollout_only)
        return rec

    def feed_line(self, line: str) -> list[dict[str, Any]]:
        parsed = parse_metric_line(line)
        if parsed is None:
            return []
        if parsed.tag == "perf":
            rec = self._record(parsed.index)
            rec.perf.update(parsed.metrics)
        elif parsed.tag == "step":
            rec = self._record(parsed.index // self.num_steps_per_rollout)
            rec.train_metrics.append(parsed.metrics)
            return []
        elif parsed.tag == "eval":
            self.eval.setdefault(parsed.index, {}).update(parsed.metrics)
            return []
        else:  # critic-step and other roles
            return []
        if rec.complete and rec.step not in self._emitted:
            self._emitted.add(rec.step)
            return [rec.measurement()]
        return []

    def feed(self, text: str) -> list[dict[str, Any]]:
        """Feed a chunk of log output; lines split across chunks are joined."""
        data = self._partial + text
        lines = data.split("\n")
        self._partial = lines.pop()
        out: list[dict[str, Any]] = []
        for line in lines:
            out.extend(self.feed_line(line))
        return out

    def finish(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self._partial:
            out.extend(self.feed_line(self._partial))
            self._partial = ""
        for step in sorted(self.steps):
            rec = self.steps[step]
            if step not in self._emitted and rec.kept:
                self._emitted.add(step)
                out.append(rec.measurement())
        return out

    def measurements(self) -> list[dict[str, Any]]:
        """All steps worth recording (`StepRecord.kept`), in step order (does not consume anything)."""
        return [self.steps[s].measurement() for s in sorted(self.steps) if self.steps[s].kept]


def parse_miles_log(lines: Iterable[str], num_steps_per_rollout: int = 1) -> list[dict[str, Any]]:
    """Per-step measurement dicts from a whole log (steps with a training-side perf line, in order)."""
    parser = MilesLogParser(num_steps_per_rollout)
    for line in lines:
        parser.feed_line(line)
    return parser.measurements()
