"""Golden test: the seed plan must produce the published MI355X launch (LMSYS blog 2026-07-10, section 2.1 of
docs/reference/dsv4-flash-and-miles.md) plus the defaults of the PR #1300 AMD launcher that command relied on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.backends.miles import MODEL_ARGS_PLACEHOLDER, build_miles_launch, render_dry_run, run_miles
from perfmodel.inputs.plan import load_plan

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-mi355x-dsv4.yaml"

# Flags of the published command that concern the model/job, as they appear in Miles' own arguments.
PUBLISHED = {
    "--tensor-model-parallel-size": ["1"],
    "--pipeline-model-parallel-size": ["4"],
    "--decoder-last-pipeline-num-layers": ["10"],
    "--context-parallel-size": ["1"],
    "--expert-model-parallel-size": ["4"],
    "--expert-tensor-parallel-size": ["1"],
    "--rollout-batch-size": ["32"],
    "--n-samples-per-prompt": ["8"],
    "--rollout-max-response-len": ["4096"],
    "--max-tokens-per-gpu": ["8192"],
    "--sglang-max-running-requests": ["48"],
    "--sglang-max-total-tokens": ["524288"],
    "--num-rollout": ["200"],
    "--num-steps-per-rollout": ["1"],
    # --actor-num-nodes 2 --rollout-num-nodes 2 on 8-GPU nodes
    "--actor-num-nodes": ["2"],
    "--actor-num-gpus-per-node": ["8"],
    "--rollout-num-gpus": ["16"],
    # --context-length 16384
    "--rollout-max-context-len": ["16384"],
    "--seq-length": ["16384"],
    "--sglang-context-length": ["16384"],
}

# PR #1300 launcher defaults (mode normal) the blog command did not override.
PR1300_DEFAULTS = {
    "--update-weight-transfer-mode": ["broadcast"],
    "--update-weight-buffer-size": [str(256 * 1024 * 1024)],
    "--recompute-granularity": ["full"],
    "--recompute-method": ["uniform"],
    "--recompute-num-layers": ["1"],
    "--advantage-estimator": ["grpo"],
    "--kl-loss-type": ["low_var_kl"],
    "--micro-batch-size": ["1"],
    "--log-probs-max-tokens-per-gpu": ["8192"],
    "--rollout-max-prompt-len": ["12288"],
    "--rollout-function-path": ["fully_async_rollout.generate_rollout_fully_async"],
    "--pause-generation-mode": ["in_place"],
    "--rollout-num-gpus-per-engine": ["8"],
    "--train-memory-margin-bytes": [str(16 * 1024**3)],
    "--sglang-mem-fraction-static": ["0.7"],
    "--global-batch-size": ["256"],
    "--over-sampling-batch-size": ["512"],
    "--qkv-format": ["bshd"],
    "--optimizer": ["adam"],
}
FLOATS = {"--eps-clip": 0.2, "--eps-clip-high": 0.28, "--kl-loss-coef": 0.0, "--entropy-coef": 0.0, "--lr": 1e-6}
SWITCHES = ("--use-tis", "--optimizer-cpu-offload", "--use-precision-aware-optimizer",
            "--overlap-cpu-optimizer-d2h-h2d", "--bf16", "--deterministic-mode", "--disable-weights-backuper",
            "--balance-data",
            "--moe-router-freeze-gate", "--freeze-e-score-correction-bias")
ABSENT = ("--colocate", "--sequence-parallel", "--decoder-first-pipeline-num-layers", "--use-dynamic-batch-size",
          "--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout", "--use-kl-loss")

# Recipe env: RCCL transport tuning and ROCm settings of the PR #1300 launcher, the published --extra-env-vars.
RCCL_ENV = {"NCCL_IB_TC": "160", "NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": "7", "NCCL_IB_QPS_PER_CONNECTION": "2",
            "NCCL_IB_SPLIT_DATA_ON_QPS": "0", "NCCL_ALGO": "Ring", "NCCL_PXN_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "2",
            "NCCL_NVLS_ENABLE": "0", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "USE_ROCM": "1",
            "HIP_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "SGLANG_USE_AITER": "1", "SGLANG_OPT_USE_FUSED_HASH_TOPK": "true",
            "MILES_DSV4_CKPT_VERSION": "2604", "MEGATRON_USE_KV_QAT": "1", "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0"}
BLOG_EXTRA_ENV = {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_TRACE_BUFFER_SIZE": "200000",
                  "TORCH_FR_BUFFER_SIZE": "200000", "TORCH_NCCL_DESYNC_DEBUG": "1",
                  "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "GPU_MAX_HW_QUEUES": "2", "NCCL_P2P_NET_CHUNKSIZE": "262144"}


@pytest.fixture(scope="module")
def launch():
    return build_miles_launch(load_plan(SEED), str(SEED), run_id="golden")


@pytest.mark.parametrize("flag", sorted(PUBLISHED))
def test_published_flags(launch, flag):
    assert launch.values(flag) == PUBLISHED[flag], f"{flag}: {launch.values(flag)}"


@pytest.mark.parametrize("flag", sorted(PR1300_DEFAULTS))
def test_pr1300_defaults(launch, flag):
    assert launch.values(flag) == PR1300_DEFAULTS[flag], f"{flag}: {launch.values(flag)}"


def test_float_flags_and_switches(launch):
    for flag, value in FLOATS.items():
        assert [float(v) for v in launch.values(flag)] == [value], flag
    for flag in SWITCHES:
        assert launch.has(flag), flag
    for flag in ABSENT:
        assert not launch.has(flag), flag


def test_each_flag_once(launch):
    flags = [a for a in launch.train_args if a.startswith("--")]
    dupes = {f for f in flags if flags.count(f) > 1}
    assert not dupes


def test_entry_point_and_submission(launch):
    assert launch.entry_point == "train_async.py"
    assert launch.entry_script == "/workspace/miles/train_async.py"
    argv = launch.submit_argv
    assert argv[:3] == ("ray", "job", "submit")
    sep = argv.index("--")
    assert argv[sep + 1:sep + 4] == ("python3", "/workspace/miles/train_async.py", MODEL_ARGS_PLACEHOLDER)
    env = json.loads(argv[argv.index("--runtime-env-json") + 1])["env_vars"]
    assert env == launch.runtime_env_vars
    assert launch.model_args.model_type == "deepseek-v4-flash"
    assert launch.num_nodes == 4


def test_runtime_env(launch):
    env = launch.runtime_env_vars
    for k, v in {**RCCL_ENV, **BLOG_EXTRA_ENV}.items():
        assert env.get(k) == v, k
    assert env["PYTHONPATH"].split(":") == ["/workspace/miles", "/workspace/miles/examples/fully_async",
                                            "/root/Megatron-LM"]
    assert env["RAY_DEDUP_LOGS"] == "0"
    # site network settings are copied from the submitting shell, never invented
    assert "NCCL_SOCKET_IFNAME" not in env and "NCCL_SOCKET_IFNAME" in launch.passthrough_env
    resolved = launch.resolved_env({"NCCL_SOCKET_IFNAME": "ens1", "MASTER_ADDR": "10.0.0.1", "UNRELATED": "x"})
    assert resolved["NCCL_SOCKET_IFNAME"] == "ens1" and resolved["MASTER_ADDR"] == "10.0.0.1"
    assert "UNRELATED" not in resolved


def test_ray_cluster_commands(launch):
    assert launch.ray_head[:3] == ("ray", "start", "--head")
    assert "--num-gpus" in launch.ray_head and launch.ray_head[launch.ray_head.index("--num-gpus") + 1] == "8"
    assert launch.ray_worker[:4] == ("ray", "start", "--address", "$HEAD_IP:6379")


def test_dry_run_text(tmp_path, capsys):
    import io

    buf = io.StringIO()
    result = run_miles(load_plan(SEED), str(SEED), dry_run=True, out=buf, run_id="seed-dry")
    text = buf.getvalue()
    assert result.status == "DRY_RUN" and result.ok and result.steps == []
    assert "ray start \\\n  --head" in text
    assert "# 2. Each of the 3 worker node(s)" in text
    assert '/workspace/miles/train_async.py "${MODEL_ARGS[@]}"' in text
    assert "--decoder-last-pipeline-num-layers 10" in text
    assert "--runtime-env-json '{" in text
    assert "#   NCCL_IB_TC=160" in text
    assert "deepseek-v4-flash.py" in text and "deepseek-v4-flash.sh" in text
    assert render_dry_run(result.launch, str(SEED)) == text


# Miles' PPO and critic arguments as its parser defines them (radixark/miles 31f1ca961,
# miles/utils/arguments.py::add_algo_arguments; docs/rl-phases.md, Miles section 4.1), with Miles' defaults.
MILES_PPO_FLAGS = {"--advantage-estimator": ["ppo"], "--value-clip": ["0.2"], "--gamma": ["1.0"], "--lambd": ["1.0"],
                   "--critic-lr": ["1e-06"], "--num-critic-only-steps": ["0"]}


def test_ppo_launch_passes_the_critic_arguments_miles_defines():
    plan = load_plan(SEED)
    ppo = plan.model_copy(update={"rl": plan.rl.model_copy(update={"algorithm": "ppo"})})
    launch = build_miles_launch(ppo, str(SEED), run_id="golden-ppo")
    for flag, value in MILES_PPO_FLAGS.items():
        assert launch.values(flag) == value, f"{flag}: {launch.values(flag)}"
    # the critic shares the actor's GPUs and swaps with it: its weights need the CPU backup Miles keeps
    assert not launch.has("--disable-weights-backuper") and not launch.has("--kl-coef")
    assert any("critic" in n for n in launch.notes)
    opts = {**plan.executor.options, "critic_lr": 5e-6, "critic_load": "/ckpt/critic", "normalize_advantages": True}
    tuned = ppo.model_copy(update={"executor": plan.executor.model_copy(update={"options": opts})})
    launch = build_miles_launch(tuned, str(SEED), run_id="golden-ppo")
    assert launch.values("--critic-lr") == ["5e-06"] and launch.values("--critic-load") == ["/ckpt/critic"]
    assert launch.has("--normalize-advantages")
    flags = [a for a in launch.train_args if a.startswith("--")]
    assert len(flags) == len(set(flags))
