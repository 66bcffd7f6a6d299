"""Zero-shot priors per component: how far each part of a prediction is from published measurements before any
calibration, as one uncertain stack multiplier per component with its own spread (ln, one sigma).

The spreads are measured, not assumed: `python scripts/prior_sigmas.py` scores every shipped case zero-shot, takes
each measured figure's ln error and its ln-sensitivity to each multiplier, and finds the spreads that make those
errors most likely (errors ~ N(0, RUN_SIGMA_LOG^2 + sum_c (g_c sigma_c)^2): a maximum-likelihood fit of three
numbers to hundreds of figures, over groups of cases, never one). It writes `studies/validation/prior-sigmas.json`;
tests/test_priors.py checks that the numbers below are the ones it wrote. Components the model prices from first
principles and published runs check well (dense training) get a narrow spread; mechanisms priced from guesses
(the weight update) a wide one: a band then says which part of a prediction is known and which is not.

A calibration overlay replaces these with its fit's covariance; the fit's own prior (calibration.PRIOR_SIGMA_LOG,
the pull toward first principles) is a regularizer and stays as it is.
"""

from __future__ import annotations

import math

from perfmodel.inputs.scenario import Scenario

SIGMAS_FILE = "studies/validation/prior-sigmas.json"

# The multiplier per component, in the order bands and odds list them.
TRAIN, ROLLOUT, WEIGHT_UPDATE = "stack.train_compute_scale", "stack.rollout_compute_scale", \
    "stack.weight_update_time_scale"
# The trainer's host (the ops it issues one by one, at the CPU's pace): what a host-bound layer's time rides on,
# which the compute multiplier does not move.
HOST = "stack.host_op_time_scale"
COMPONENTS = (TRAIN, ROLLOUT, WEIGHT_UPDATE, HOST)
# The engine's multiplier as a serving benchmark measures it: the engine alone, as its recipe configured it. An RL
# run's rollout adds the framework's own engine settings and handling (ROLLOUT's spread); the two are fitted apart.
SERVE_ROLLOUT = "stack.rollout_compute_scale (serve)"
SIGMA_KEYS = (*COMPONENTS, SERVE_ROLLOUT)

# Maximum-likelihood spreads from scripts/prior_sigmas.py (SIGMAS_FILE, its `sigma_log`).
ZERO_SHOT_SIGMA_LOG: dict[str, float] = {TRAIN: 0.331, ROLLOUT: 0.414, WEIGHT_UPDATE: 0.42,
                                         HOST: 0.446, SERVE_ROLLOUT: 0.505}


def sigma_key(key: str, kind: str) -> str:
    """The spread a multiplier takes on a run of this kind (`kind: serve` takes the engine's own)."""
    return SERVE_ROLLOUT if kind == "serve" and key == ROLLOUT else key


def zero_shot_sigma_log(key: str, kind: str) -> float:
    """A multiplier's zero-shot spread (ln) on a run of this kind (`sigma_key`)."""
    return ZERO_SHOT_SIGMA_LOG[sigma_key(key, kind)]


def zero_shot_parameters(scn: Scenario) -> list[str]:
    """The multipliers a run's figures depend on: training (its compute and its host's op issue) for every run;
    the rollout and the weight update for RL runs; the engine alone for a serving benchmark."""
    if scn.run.kind == "serve":
        return [ROLLOUT]
    return [TRAIN, ROLLOUT, WEIGHT_UPDATE, HOST] if scn.run.rl else [TRAIN, HOST]


def refit_parameters(scn: Scenario) -> list[str]:
    """The multipliers a calibration on a group's other runs refits for this run (`perfmodel validate --cv`): its
    zero-shot ones less the host's. Other runs, bound by their own host or not, say little of this run's: refitted
    on one other run of its group, the host's multiplier moved the host-bound runs' error from 29% to 37%."""
    return [k for k in zero_shot_parameters(scn) if k != HOST]


# The part of a prediction's error that is a plan's own, in ln units, by the job's kind: the scatter of predicted
# ln(ratio) about measured ln(ratio) over pairs of published runs of one model on the same hardware and stack release
# (the choice a sweep makes), divided by sqrt(2) (a pair carries two plans' errors; what they share cancels in the
# ratio). Source: `perfmodel validate --json` over studies/validation/cases and studies/validation/*/cases,
# pairs.same_hardware_and_stack.ratio_error_sigma_log_by_kind: pretrain 0.2055 (0.1735 before the host's floor took the
# Grace CPU's per-op time and the recipes' CUDA graph scopes: B200's Qwen3-30B at one micro-batch, host-bound, moved
# further from the rest of its release; 0.1795 before Blackwell's softmax exponentials were priced, 0.1715 before
# MXFP8's own GEMM rate, which widened Llama 3 70B's FP8-CS vs MXFP8 pairs while ordering more pairs right; 0.132 before
# the layout sweeps of studies/validation/layout-sweeps, whose ZeRO-3 and FSDP rows the model misprices), rl 0.4964
# (0.5846 before NeMo-RL's eight-step-off Qwen3-30B row had its off-policy window, `rl.off_policy_steps`: priced as one
# step's batch, its pairs with the one-step-off rows came out at twice their measured ratio; 0.5405 before NeMo-RL
# PR #2779's two DeepSeek-V3 runs joined: the v0.6 recipe on a newer build, 121.2 s against 134
# s, which the model cannot tell apart, and its async layout, priced 33% fast; 0.5445 before NeMo-RL's broadcast and
# colocated gathers took the exporters' order and group; 0.326 before NeMo-RL's reshard refits joined its broadcast,
# NIXL and IPC ones: mechanisms the model orders right but whose ratios it misses by up to e^1), serve 0.178 (0.1831
# before an eager prefill took at least its kernels' issue time on the host; 0.1763
# before the GPUs' memory was taken as their drivers report it, less what the runtime holds when SGLang starts: the H200
# 8k/1k concurrency-64 point's KV pool grew by a nineteenth, to within 1.2% of SGLang's logged pool, its TTFT from 4.8x
# to 1.18x the measured, and its pairs with the same setup's other concurrencies moved with it; 0.4502 before the
# InferenceX SGLang DeepSeek-R1 concurrency sweeps on MI355X, MI325X and H200 joined: pairs of one setup at two
# concurrencies, which the engine model orders and sizes well; 0.441 before the AMD FP8 GEMM rates were read off AMD's
# own FP8/BF16 measurements); tests/test_validation_pairs.py checks these against the cases.
# A calibrated band keeps at least this spread: the fit's runs say nothing of another run's own error.
PLAN_SIGMA_LOG = {"pretrain": 0.2055 / math.sqrt(2), "rl": 0.4964 / math.sqrt(2), "serve": 0.178 / math.sqrt(2)}
