"""Mapping rules of the miles backend (plan -> Miles arguments), option validation, model-args resolution, and the
submission flow against a stand-in job client (the real Ray path is in test_miles_ray.py)."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from executor.backends.miles import (
    ModelArgsRef,
    build_miles_launch,
    parse_miles_options,
    pipeline_split_args,
    run_miles,
)
from perfmodel.errors import InputError
from perfmodel.inputs.loading import parse
from perfmodel.inputs.plan import Plan

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-mi355x-dsv4.yaml"
GB300_CASE = REPO / "studies" / "validation" / "cases" / "miles-gb300-dsv4flash-bf16train.yaml"


@pytest.fixture
def seed() -> dict:
    return copy.deepcopy(yaml.safe_load(SEED.read_text()))


def plan_of(d: dict) -> Plan:
    return parse(Plan, d, "test.yaml")


def launch_of(d: dict, **kw: Any):
    return build_miles_launch(plan_of(d), "test.yaml", **kw)


def gb300_colocated() -> dict:
    case = yaml.safe_load(GB300_CASE.read_text())
    for k in ("source", "measured", "notes"):
        case.pop(k)
    case["id"] = "gb300-colocated"
    case["executor"] = {"backend": "miles", "options": {}}
    return case


# --- options -------------------------------------------------------------------------------------------------------


def test_unknown_option_names_the_key(seed):
    seed["executor"]["options"]["num_rollouts"] = 3
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "executor.options.num_rollouts"
    assert "num_rollout" in e.value.message  # the valid keys are listed
    assert e.value.source == "test.yaml"


def test_bad_option_value_names_the_key():
    with pytest.raises(InputError) as e:
        parse_miles_options({"num_rollout": 0}, "p.yaml")
    assert e.value.field == "executor.options.num_rollout"


def test_defaults_and_string_extra_args():
    o = parse_miles_options({"extra_args": "--wandb-team t --foo 'a b'", "extra_env": {"X": 1, "Y": True}})
    assert o.extra_args == ["--wandb-team", "t", "--foo", "a b"]
    assert o.extra_env == {"X": "1", "Y": "true"}
    assert o.miles_root == "/root/miles" and o.num_rollout == 100


def test_wrong_backend_and_pretrain(seed, case_dict):
    seed["executor"]["backend"] = "local"
    seed["executor"]["options"] = {}
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "executor.backend"
    case_dict.pop("measured"), case_dict.pop("source"), case_dict.pop("notes", None)
    case_dict["id"] = "pre"
    with pytest.raises(InputError) as e:
        launch_of(case_dict)
    assert e.value.field == "kind"


def test_extra_args_and_env_are_appended(seed):
    seed["executor"]["options"].update(extra_args=["--wandb-team", "amd"], extra_env={"NCCL_IB_TC": "106"})
    la = launch_of(seed)
    assert la.train_args[-2:] == ("--wandb-team", "amd")
    assert la.runtime_env_vars["NCCL_IB_TC"] == "106"  # the plan's env overrides the recipe


def test_reasoning_effort_is_one_value_for_the_template_and_the_engine(seed):
    """The recipe's engine env (SGLANG_REASONING_EFFORT, PR1300: max) follows the plan's chat template kwargs, so
    prompts and engine never disagree; without a stated effort the recipe's value stays."""
    la = launch_of(seed)
    kwargs = json.loads(la.values("--apply-chat-template-kwargs")[0])
    assert la.runtime_env_vars["SGLANG_REASONING_EFFORT"] == kwargs["reasoning_effort"] == "high"
    seed["executor"]["options"]["apply_chat_template_kwargs"] = {"thinking_mode": "thinking"}
    assert launch_of(seed).runtime_env_vars["SGLANG_REASONING_EFFORT"] == "max"


def test_wandb_options(seed):
    seed["executor"]["options"].update(wandb_project="dsv4", wandb_team="amd")
    la = launch_of(seed, run_id="r1")
    assert la.values("--wandb-project") == ["dsv4"] and la.values("--wandb-group") == ["r1"]
    assert la.has("--use-wandb") and "WANDB_API_KEY" in la.passthrough_env
    assert "WANDB_API_KEY" not in la.runtime_env_vars


# --- mapping rules -------------------------------------------------------------------------------------------------


def test_colocated_sync_on_nvidia():
    la = launch_of(gb300_colocated())
    assert la.entry_point == "train.py"
    assert la.has("--colocate") and not la.has("--rollout-num-gpus")
    assert not la.has("--update-weight-transfer-mode")  # colocated engines update from tensors
    assert not la.has("--rollout-function-path") and not la.has("--pause-generation-mode")
    assert la.values("--actor-num-nodes") == ["8"] and la.values("--actor-num-gpus-per-node") == ["4"]
    assert la.values("--tensor-model-parallel-size") == ["2"] and la.has("--sequence-parallel")
    assert la.values("--context-parallel-size") == ["2"]
    assert la.values("--sglang-kv-cache-dtype") == ["fp8_e4m3"]
    assert la.values("--sglang-ep-size") == ["4"] and la.values("--rollout-num-gpus-per-engine") == ["4"]
    assert la.values("--num-steps-per-rollout") == ["1"]
    env = la.runtime_env_vars
    assert env["NCCL_NVLS_ENABLE"] == "1" and "USE_ROCM" not in env and "NCCL_IB_TC" not in env
    assert not la.has("--sglang-moe-runner-backend")  # the triton MoE runner is the AMD recipe's
    assert la.num_nodes == 8
    # 43 layers over PP8 by the model's balanced split: not expressible as first/last -> explicit layout
    (layout,) = la.values("--pipeline-model-parallel-layout")
    assert layout.count("t") == 43 and layout.startswith("E") and layout.endswith("L") and layout.count("|") == 7


@pytest.mark.parametrize("stages,pp,vpp,expected", [
    ([8, 8, 8, 8], 4, 1, []),
    ([11, 11, 11, 10], 4, 1, ["--decoder-last-pipeline-num-layers", "10"]),
    ([4, 6, 6, 6], 4, 1, ["--decoder-first-pipeline-num-layers", "4"]),
    ([4, 6, 6, 6, 6, 6, 6, 3], 8, 1, ["--decoder-first-pipeline-num-layers", "4",
                                      "--decoder-last-pipeline-num-layers", "3"]),
    ([5, 4], 2, 1, ["--decoder-last-pipeline-num-layers", "4"]),
    ([4, 4, 4, 4], 2, 2, ["--num-virtual-stages-per-pipeline-rank", "2"]),
    ([2, 3, 1], 3, 1, ["--decoder-first-pipeline-num-layers", "2", "--decoder-last-pipeline-num-layers", "1"]),
    ([2, 3, 4, 1], 4, 1, ["--pipeline-model-parallel-layout", "Ett|ttt|tttt|tL"]),
    ([3, 4, 4, 3], 2, 2, ["--pipeline-model-parallel-layout", "Ettt|tttt|tttt|tttL"]),
    ([6], 1, 1, []),
])
def test_pipeline_split_args(stages, pp, vpp, expected):
    assert pipeline_split_args(stages, pp, vpp)[0] == expected


def test_vpp_plan(seed):
    seed["train"].update(pipeline_layers=None, schedule="interleaved", layout={"tp": 1, "pp": 2, "vpp": 2, "ep": 4})
    seed["train"].pop("pipeline_layers")
    la = launch_of(seed)
    # 43 layers over 4 virtual stages by the balanced split -> explicit layout with 4 segments
    (layout,) = la.values("--pipeline-model-parallel-layout")
    assert layout.count("|") == 3 and layout.count("t") == 43
    assert la.values("--pipeline-model-parallel-size") == ["2"]
    assert not la.has("--microbatch-group-size-per-virtual-pipeline-stage")
    seed["train"]["microbatch_group_size_per_vp_stage"] = 4
    assert launch_of(seed).values("--microbatch-group-size-per-virtual-pipeline-stage") == ["4"]


def test_materialized_attention_selects_unfused_backend(seed):
    assert not launch_of(seed).has("--attention-backend")
    seed["model"] = {"id": "llama3-8b"}
    seed["stack_options"] = {"attention_kernel": "materialized"}
    seed["train"].update(layout={"tp": 1, "pp": 1, "ep": 1})
    seed["train"].pop("pipeline_layers", None)
    assert launch_of(seed).values("--attention-backend") == ["unfused"]


def test_the_ep_all_to_all_overlap_schedule_passes_megatrons_flag(seed):
    assert not launch_of(seed).has("--overlap-moe-expert-parallel-comm")
    seed["train"].update(schedule="combined-1f1b", recompute="selective")
    seed["train"]["layout"]["vpp"] = 2
    seed["train"].pop("pipeline_layers", None)
    assert launch_of(seed).has("--overlap-moe-expert-parallel-comm")


def test_recompute_and_offload(seed):
    seed["train"].update(recompute="selective", optimizer_offload_fraction=0.75)
    la = launch_of(seed)
    assert la.values("--recompute-granularity") == ["selective"] and not la.has("--recompute-method")
    assert la.values("--optimizer-offload-fraction") == ["0.75"] and la.has("--optimizer-cpu-offload")
    seed["train"].update(recompute_modules=["mla_up_proj", "moe_act"])
    assert launch_of(seed).values("--recompute-modules") == ["mla_up_proj", "moe_act"]
    seed["train"].pop("recompute_modules")
    seed["train"].update(recompute="full", recompute_num_layers=2)
    la = launch_of(seed)
    assert la.values("--recompute-method") == ["block"] and la.values("--recompute-num-layers") == ["2"]
    seed["train"].pop("recompute_num_layers")
    seed["train"].update(recompute="none", optimizer_offload_fraction=0.0)
    la = launch_of(seed)
    assert not la.has("--recompute-granularity")
    for f in ("--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d",
              "--optimizer-offload-fraction"):
        assert not la.has(f)


def test_activation_offload(seed):
    assert not launch_of(seed).has("--cpu-offloading-num-layers")
    seed["train"].update(activation_offload_layers=6, recompute="none", layout={"tp": 1, "pp": 1, "ep": 4})
    seed["train"].pop("pipeline_layers", None)
    assert launch_of(seed).values("--cpu-offloading-num-layers") == ["6"]


def test_moe_dispatcher(seed):
    assert not launch_of(seed).has("--moe-flex-dispatcher-backend")  # alltoall: the model script's own setting
    seed["train"]["moe_dispatcher"] = "deepep"
    la = launch_of(seed)
    assert la.values("--moe-token-dispatcher-type") == ["flex"]
    assert la.values("--moe-flex-dispatcher-backend") == ["deepep"]
    seed["train"]["moe_dispatcher"] = "hybridep"  # NVIDIA's Hybrid-EP: not on the seed's MI355X
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "train.moe_dispatcher"
    seed["hardware"] = "gb300"
    assert launch_of(seed).values("--moe-flex-dispatcher-backend") == ["hybridep"]


def test_dynamic_batch_size_rules(seed):
    # DSV4 trains with qkv bshd, where Miles forbids dynamic batch size
    seed["executor"]["options"]["dynamic_batch_size"] = True
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "executor.options.dynamic_batch_size"
    seed["executor"]["options"].update(dynamic_batch_size=None, qkv_format="thd")
    la = launch_of(seed)
    assert la.has("--use-dynamic-batch-size") and la.values("--qkv-format") == ["thd"]
    seed["train"].pop("max_tokens_per_gpu")
    la = launch_of(seed)
    assert not la.has("--use-dynamic-batch-size") and not la.has("--max-tokens-per-gpu")


def test_global_batch_maps_to_steps_per_rollout(seed):
    seed["train"]["global_batch"] = 128
    la = launch_of(seed)
    assert la.values("--num-steps-per-rollout") == ["2"] and la.values("--global-batch-size") == ["128"]
    assert la.num_steps_per_rollout == 2
    seed["train"]["global_batch"] = 96
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "train.global_batch"


def test_dp_attention_engine(seed):
    seed["rl"]["rollout"].update(engine_gpus=8, tp=8, dp=8, ep=8, dp_attention=True)
    la = launch_of(seed)
    assert la.values("--sglang-dp-size") == ["8"] and la.has("--sglang-enable-dp-attention")
    assert la.values("--sglang-ep-size") == ["8"] and la.values("--sglang-tp-size") == ["8"]


def test_dp_without_dp_attention_is_refused(seed):
    seed["rl"]["rollout"].update(engine_gpus=8, tp=4, dp=2, dp_attention=False)
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "rl.rollout.dp_attention"


def test_rollout_precision_selects_checkpoint(seed):
    seed["executor"]["options"].update(hf_checkpoint="/m/bf16", fp8_hf_checkpoint="/m/fp8")
    assert launch_of(seed).values("--hf-checkpoint") == ["/m/fp8"]
    seed["rl"]["rollout"]["precision"] = "bf16"
    assert launch_of(seed).values("--hf-checkpoint") == ["/m/bf16"]


def test_fp8_training(seed):
    seed["train"]["precision"] = "fp8"
    la = launch_of(seed)
    assert la.values("--fp8-recipe") == ["blockwise"] and la.has("--bf16")
    assert la.runtime_env_vars["NVTE_FP8_BLOCK_SCALING_FP32_SCALES"] == "1"


def test_disk_weight_update(seed):
    seed["rl"]["weight_update"]["mode"] = "disk"
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "executor.options.update_weight_disk_dir"
    seed["executor"]["options"].update(update_weight_disk_dir="/nfs/w", update_weight_local_checkpoint_dir="/nvme/w")
    la = launch_of(seed)
    assert la.values("--update-weight-transfer-mode") == ["disk-delta"]


def test_sync_disaggregated_uses_train_py(seed):
    seed["rl"]["async"] = False
    la = launch_of(seed)
    assert la.entry_point == "train.py" and la.values("--rollout-num-gpus") == ["16"]
    assert not la.has("--rollout-function-path") and not la.has("--pause-generation-mode")
    assert "/workspace/miles/examples/fully_async" not in la.runtime_env_vars["PYTHONPATH"]


def test_an_off_policy_window_bounds_staleness_and_fills_the_engines(seed):
    seed["rl"]["off_policy_steps"] = 4
    la = launch_of(seed)
    n = seed["rl"]["prompts_per_step"] * seed["rl"]["samples_per_prompt"]
    assert la.values("--max-weight-staleness") == ["4"]
    assert la.values("--async-max-concurrent-samples") == [str(4 * n)]
    seed["executor"]["options"]["fully_async"] = False  # train_async.py alone runs one step ahead
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "executor.options.fully_async"


def test_ref_model_keeps_backuper(seed):
    seed["rl"]["log_probs"]["ref_model"] = True
    seed["executor"]["options"]["kl_loss_coef"] = 0.01
    la = launch_of(seed)
    assert la.has("--use-kl-loss") and not la.has("--disable-weights-backuper")
    assert la.values("--kl-loss-coef") == ["0.01"]


def test_actor_gpus_must_fill_nodes(seed):
    seed.update(gpus=28)
    seed["rl"].update(actor_gpus=12, rollout_gpus=16)
    seed["train"]["layout"] = {"tp": 1, "pp": 6, "ep": 2}  # 12 actor GPUs: 1.5 nodes of 8
    seed["train"].pop("pipeline_layers")
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "rl.actor_gpus"


def test_single_partial_node(seed):
    seed.update(gpus=8)
    seed["rl"].update(actor_gpus=4, rollout_gpus=4)
    seed["rl"]["rollout"].update(engine_gpus=4, tp=4)
    seed["train"]["layout"] = {"tp": 1, "pp": 4, "ep": 1}
    la = launch_of(seed)
    assert la.values("--actor-num-nodes") == ["1"] and la.values("--actor-num-gpus-per-node") == ["4"]
    assert la.num_nodes == 1


def test_model_without_recipe_needs_model_type(seed):
    seed["model"] = {"hf_config": json.loads((REPO / "perfmodel/catalogue/llama3-8b.json").read_text())}
    seed["train"].update(layout={"tp": 1, "pp": 4, "ep": 1}, pipeline_layers=[8, 8, 8, 8])
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "executor.options.model_type"
    seed["executor"]["options"]["model_type"] = "llama3.1-8B-Instruct"
    la = launch_of(seed)
    assert la.model_args.model_type == "llama3.1-8B-Instruct"
    assert not la.has("--qkv-format") and la.has("--use-dynamic-batch-size")  # thd default: dynamic batches
    assert not la.has("--decoder-last-pipeline-num-layers")  # even split
    assert "SGLANG_USE_AITER" not in la.runtime_env_vars  # DSV4 ROCm kernels are the DSV4 recipe's


# --- model args ------------------------------------------------------------------------------------------------------


def test_model_args_from_sh_script(tmp_path):
    models = tmp_path / "scripts" / "models"
    models.mkdir(parents=True)
    (models / "tiny.sh").write_text('NLAYERS="${MODEL_ARGS_NUM_LAYERS:-4}"\n'
                                    'MODEL_ARGS=(--num-layers $NLAYERS --moe-layer-freq "[1,1,1,1]" --swiglu)\n'
                                    'echo noise\n')
    ref = ModelArgsRef("tiny", str(tmp_path))
    assert ref.resolve() == ["--num-layers", "4", "--moe-layer-freq", "[1,1,1,1]", "--swiglu"]
    assert "source" in ref.shell_setup()


def test_model_args_from_py_script(tmp_path):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="--num-layers 43 --moe-layer-freq [1,1]\n", stderr="")

    ref = ModelArgsRef("deepseek-v4-flash", "/r", "python3", "auto")
    got = ref.resolve(run=fake_run, exists=lambda p: p.endswith(".py"))
    assert got == ["--num-layers", "43", "--moe-layer-freq", "[1,1]"]
    assert calls == [["python3", "/r/miles/utils/external_utils/model_args_utils.py", "deepseek-v4-flash"]]


def test_model_args_missing_checkout():
    with pytest.raises(InputError) as e:
        ModelArgsRef("x", "/nonexistent").resolve(source="p.yaml")
    assert e.value.field == "executor.options.miles_root"
    assert ModelArgsRef("x", "/r", fmt="explicit", explicit=("--a", "1")).resolve() == ["--a", "1"]


# --- submission against a stand-in client --------------------------------------------------------------------------

FAKE_LOG = (
    "[2026-08-09 10:00:00.000 main] train_async.py:20 - starting\n"
    "(RolloutManager pid=1) [t rollout] metrics.py:89 - perf 0: {'perf/rollout_time': 71.5, "
    "'perf/tokens_per_gpu_per_sec': 338.0}\n"
    "(RolloutManager pid=1) [t rollout] metrics.py:89 - perf 1: {'perf/rollout_time': 70.0}\n"
    "(MegatronTrainRayActor pid=2) [t actor] train_metric_utils.py:56 - perf 0: {'perf/update_weights_time': 60.0, "
    "'perf/log_probs_time': 76.0, 'perf/actor_train_time': 100.0, 'perf/step_time': 300.0}\n"
    "(MegatronTrainRayActor pid=2) [t actor] train_metric_utils.py:56 - perf 1: {'perf/update_weights_time': 61.0, "
    "'perf/log_probs_time': 75.0, 'perf/actor_train_time': 99.0, 'perf/step_time': 180.0}\n"
)


class FakeClient:
    """Stands in for ray.job_submission.JobSubmissionClient (same method names and shapes)."""

    def __init__(self, log: str, hang: bool = False) -> None:
        self.log, self.hang = log, hang
        self.submitted: dict[str, Any] = {}
        self.stopped: list[str] = []

    def submit_job(self, **kw: Any) -> str:
        self.submitted = kw
        return kw["submission_id"]

    async def tail_job_logs(self, job_id: str):
        import asyncio

        for i in range(0, len(self.log), 50):
            yield self.log[i:i + 50]
        while self.hang:
            await asyncio.sleep(0.05)

    def get_job_status(self, job_id: str) -> str:
        return "STOPPED" if job_id in self.stopped else "RUNNING" if self.hang else "SUCCEEDED"

    def get_job_info(self, job_id: str) -> Any:
        return type("Info", (), {"message": "done"})()

    def get_job_logs(self, job_id: str) -> str:
        return self.log

    def stop_job(self, job_id: str) -> bool:
        self.stopped.append(job_id)
        return True


class ListStore:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add_step(self, *, run_id: str, plan_id: str, backend: str, measurement: dict[str, Any]) -> None:
        self.rows.append({"run_id": run_id, "plan_id": plan_id, "backend": backend, **measurement})


def test_run_miles_with_stand_in_client(seed, tmp_path):
    seed["executor"]["options"]["model_args"] = ["--num-layers", "43"]
    log = FAKE_LOG
    client, store = FakeClient(log), ListStore()
    res = run_miles(plan_of(seed), "test.yaml", store=store, client=client, run_id="r-1",
                    log_path=tmp_path / "job.log", environ={"NCCL_SOCKET_IFNAME": "eth9", "HOME": "/root"})
    assert res.status == "SUCCEEDED" and res.ok and res.job_id == "r-1" and res.message == "done"
    assert [r["step"] for r in store.rows] == [0, 1]
    assert store.rows[0]["run_id"] == "r-1" and store.rows[0]["backend"] == "miles"
    assert store.rows[1]["weight_update_time_s"] == 61.0 and store.rows[1]["step_time_s"] == 180.0
    assert [m["step"] for m in res.steps] == [0, 1]
    sub = client.submitted
    assert sub["submission_id"] == "r-1"
    assert sub["entrypoint"].startswith("python3 /workspace/miles/train_async.py --num-layers 43 --hf-checkpoint")
    assert sub["runtime_env"]["env_vars"]["NCCL_SOCKET_IFNAME"] == "eth9"
    assert sub["runtime_env"]["env_vars"]["MASTER_ADDR"] == "127.0.0.1"
    assert "HOME" not in sub["runtime_env"]["env_vars"]
    assert (tmp_path / "job.log").read_text() == log


def test_run_miles_timeout_stops_the_job(seed):
    seed["executor"]["options"]["model_args"] = []
    client = FakeClient(FAKE_LOG.split("\n")[1] + "\n", hang=True)
    res = run_miles(plan_of(seed), "test.yaml", client=client, run_id="r-2", timeout_s=0.5, environ={})
    assert res.status == "TIMEOUT" and client.stopped == ["r-2"] and res.steps == []


def test_a_silent_job_is_stalled_by_the_watchdog_and_stopped(seed):
    """The log goes quiet after one step: the watchdog (floor 1 s here) stops the job before the 60 s timeout and
    says where it stood; the step already logged is kept."""
    seed["executor"]["options"].update(model_args=[], watchdog_floor_s=1.0, watchdog_multiple=1e-6)
    lines = FAKE_LOG.splitlines(keepends=True)
    client, store = FakeClient(lines[0] + lines[1] + lines[3], hang=True), ListStore()  # step 0, then silence
    t0 = time.monotonic()
    res = run_miles(plan_of(seed), "test.yaml", client=client, store=store, run_id="r-3", timeout_s=60, environ={})
    assert res.status == "STALLED" and client.stopped == ["r-3"], res.status
    assert time.monotonic() - t0 < 10
    assert res.stall is not None and res.stall["timeout_s"] == 1.0 and res.stall["silent_s"] >= 1.0
    assert res.stall["steps_done"] == len(store.rows) == 1 and res.stall["phase"] == "step 2"
    assert "perf 0" in res.stall["last_progress"] and res.stall["job_status_after_stop"] == "STOPPED"


def test_ray_address_precedence(seed):
    out = io.StringIO()
    res = run_miles(plan_of(seed), "t.yaml", dry_run=True, ray_address="http://10.1.1.1:8265", out=out)
    assert res.launch.ray_address == "http://10.1.1.1:8265"
    assert "--address http://10.1.1.1:8265" in out.getvalue()
    seed["executor"]["options"]["head_ip"] = "10.2.2.2"
    la = launch_of(seed)
    assert la.ray_address == "http://10.2.2.2:8265" and la.runtime_env_vars["MASTER_ADDR"] == "10.2.2.2"
    assert "--node-ip-address" in la.ray_head and "10.2.2.2" in la.ray_head


def test_a_rollout_alone_runs_on_the_engines_gpus_with_no_trainer(seed):
    """executor.options.debug_rollout_only (the settling measurement of an engine, perfmodel/sweep/small_scale.py):
    Miles' --debug-rollout-only, nodes for the rollout GPUs only, steps recorded from the rollout line alone."""
    whole = launch_of(seed)
    assert not whole.has("--debug-rollout-only") and not whole.rollout_only
    seed["executor"]["options"]["debug_rollout_only"] = True
    la = launch_of(seed)
    assert la.has("--debug-rollout-only") and la.rollout_only
    gpn = la.gpus_per_node
    assert la.num_nodes == -(-seed["rl"]["rollout_gpus"] // gpn) < whole.num_nodes
    co = gb300_colocated()
    co["executor"]["options"]["debug_rollout_only"] = True
    with pytest.raises(InputError) as e:
        launch_of(co)
    assert e.value.field == "executor.options.debug_rollout_only" and "disaggregated" in e.value.message


def test_weight_transfer_modes_map_to_miles_or_are_refused(seed):
    seed["rl"]["weight_update"] = {"mode": "p2p", "bucket_mb": 1024}
    assert launch_of(seed).values("--update-weight-transfer-mode") == ["p2p"]
    seed["rl"]["weight_update"]["mode"] = "reshard"
    with pytest.raises(InputError) as e:
        launch_of(seed)
    assert e.value.field == "rl.weight_update.mode" and "NeMo-RL" in e.value.message
