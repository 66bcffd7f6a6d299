"""`perfmodel simulate`: one training or RL step of a run given as a file and/or flags."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from perfmodel.errors import InputError
from perfmodel.schedules import SCHEDULES

if TYPE_CHECKING:  # pydantic models: imported only when a command runs
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.serve import ServeRun

LAYOUT_FLAGS = ("tp", "pp", "cp", "ep", "etp", "vpp", "dp")
# the figures a band is printed for: the phase times, the step and its throughput
PHASE_BAND_METRICS = ("rollout_time_s", "log_probs_time_s", "train_time_s", "weight_update_time_s", "step_time_s",
                      "tokens_per_s_per_gpu", "mfu")
TRAIN_FLAGS = {"seq_len": int, "global_batch": int, "micro_batch": int, "max_tokens_per_gpu": int}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate", help="simulate one training (or RL) step and show where the time goes",
        description="Simulate one step of a run. FILE (a validation case, plan or run YAML) gives the base; "
        "flags override its fields. Without FILE, --hardware, --model, --gpus, --seq-len and --global-batch "
        "describe a pretraining step.")
    p.add_argument("file", nargs="?", metavar="FILE", help="case, plan or run YAML")
    p.add_argument("--hardware", help="hardware id (perfmodel hardware) or profile YAML")
    p.add_argument("--model", help="catalogue id (perfmodel models) or a Hugging Face config.json path")
    p.add_argument("--gpus", type=int, help="GPUs of the run")
    for f in LAYOUT_FLAGS:
        p.add_argument(f"--{f}", type=int, help=f"training {f.upper()} degree")
    for f, typ in TRAIN_FLAGS.items():
        p.add_argument(f"--{f.replace('_', '-')}", dest=f, type=typ)
    p.add_argument("--precision", choices=["bf16", "fp8"])
    p.add_argument("--schedule", choices=list(SCHEDULES))
    p.add_argument("--recompute", choices=["none", "selective", "full"])
    p.add_argument("--recompute-modules", metavar="M,M", type=lambda v: [x for x in v.split(",") if x],
                   help="selective: the submodules recomputed, comma-separated (core_attn, layernorm, mla_up_proj, "
                   "moe_act, mlp, moe, shared_experts; Megatron --recompute-modules)")
    p.add_argument("--recompute-num-layers", type=int, metavar="N",
                   help="full: only the first N layers of each pipeline chunk (Megatron --recompute-method block)")
    p.add_argument("--calibration", help="calibration overlay YAML (from perfmodel calibrate)")
    p.add_argument("--band", action="store_true", help="print a P10-P90 band on the predicted times and "
                   "throughput (the overlay's uncertainty; without one, each component's measured zero-shot spread)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace JSON of the simulated step")
    p.add_argument("--write-plan", nargs="?", const="", metavar="OUT",
                   help="FILE is a plan: write its predicted figures, the calibration they used and the stack "
                   "knobs they were priced with into it (or into OUT), the rest of the file kept as written; "
                   "`executor show` compares a run against them")
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    if args.hardware:
        data["hardware"] = args.hardware
    if args.model:
        if args.model.endswith(".json"):
            from perfmodel.inputs.loading import read_mapping

            data["model"] = {"hf_config": read_mapping(args.model)}
        else:
            data["model"] = {"id": args.model}
    if args.gpus:
        data["gpus"] = args.gpus
    train = data.setdefault("train", {})
    layout = train.setdefault("layout", {})
    changed_layout = False
    for f in LAYOUT_FLAGS:
        v = getattr(args, f)
        if v is not None:
            layout[f] = v
            changed_layout = True
    if changed_layout and args.dp is None:
        layout.pop("dp", None)  # re-derive
    for f in TRAIN_FLAGS:
        v = getattr(args, f)
        if v is not None:
            train[f] = v
    if args.recompute is not None:  # a mode's own options go with it
        for f, mode in (("recompute_modules", "selective"), ("recompute_num_layers", "full")):
            if args.recompute != mode:
                train.pop(f, None)
    for f in ("precision", "schedule", "recompute", "recompute_modules", "recompute_num_layers"):
        v = getattr(args, f)
        if v is not None:
            train[f] = v
    if changed_layout and args.schedule is None and "schedule" in train:
        train.pop("schedule")
    data.setdefault("kind", "pretrain")
    return data


def load_run_for_simulation(args: argparse.Namespace) -> tuple[RunSpec | ServeRun, str]:
    from perfmodel.inputs.loading import parse
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.run_file import load_run_file

    source = args.file or "<flags>"
    data: dict[str, Any] = {}
    if args.file:  # a case or a plan, checked as what it is; only its run part is simulated
        loaded = load_run_file(args.file)
        if loaded.kind == "serve":  # a serving benchmark: its serve section says it all
            flags = [f for f in ("hardware", "model", "gpus", *LAYOUT_FLAGS, *TRAIN_FLAGS, "precision", "schedule",
                                 "recompute", "recompute_modules", "recompute_num_layers")
                     if getattr(args, f) is not None]
            if flags or args.write_plan is not None:
                given = "--" + (flags[0].replace("_", "-") if flags else "write-plan")
                raise InputError(args.file, given, "applies to training runs; a serving benchmark's engine and "
                                 "client are its serve section: edit the file")
            return loaded, source
        data = loaded.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(RunSpec.model_fields))
    data = _overrides(args, data)
    if not args.file:
        for need in ("hardware", "model", "gpus"):
            if need not in data:
                raise InputError(source, f"--{need}", "required without FILE")
    return parse(RunSpec, data, source), source


def _write_plan(args: argparse.Namespace, run_spec: RunSpec, result: Any, cal: Any) -> None:
    import time

    from perfmodel.cost.memory.rollout import rollout_memory
    from perfmodel.cost.memory.training import training_memory
    from perfmodel.inputs.plan import Plan, prediction_blocks, write_prediction
    from perfmodel.inputs.run import RunSpec
    from perfmodel.inputs.run_file import load_run_file
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.version import __version__

    plan = load_run_file(args.file) if args.file else None
    if not isinstance(plan, Plan):
        raise InputError(args.file or "<flags>", "--write-plan", "needs FILE to be a plan (plan_version: 1); "
                         "perfmodel sweep writes them, examples/*.yaml are some")
    if RunSpec.model_validate(plan.model_dump(include=set(RunSpec.model_fields))) != run_spec:
        raise InputError(args.file, "--write-plan", "the flags change the plan: edit the file, then write its "
                         "prediction")
    scn = build_scenario(run_spec, source=args.file)
    blocks = prediction_blocks(result.metrics(), training_memory(scn).total_bytes,
                               rollout_memory(scn).total_bytes if run_spec.rl else None,
                               run_spec.model_dump(mode="json", by_alias=True, exclude_none=True), cal)
    out = args.write_plan or args.file
    header = (f"written by perfmodel simulate --write-plan ({__version__}, {time.strftime('%Y-%m-%d')}): "
              "what the model predicts for this plan, and with what")
    write_prediction(args.file, out, blocks, header)
    print(f"wrote the prediction into {out}")


def run(args: argparse.Namespace) -> int:
    from perfmodel.api import simulate
    from perfmodel.calibration import load_calibration, prediction_band
    from perfmodel.files import writable_file
    from perfmodel.inputs.scenario import build_scenario
    from perfmodel.report.text import print_result

    if args.trace:
        writable_file(args.trace, "--trace")  # before the work, not after it
    if args.write_plan:
        writable_file(args.write_plan, "--write-plan")
    run_spec, source = load_run_for_simulation(args)
    cal = load_calibration(args.calibration) if args.calibration else None
    result = simulate(run_spec, calibration=cal, trace=bool(args.trace), source=source)
    bands = prediction_band(build_scenario(run_spec, source=source), cal) if args.band else {}
    if args.trace:
        from perfmodel.trace import write_trace

        write_trace(result.spans(), args.trace)
    if args.write_plan is not None:
        _write_plan(args, run_spec, result, cal)
    if args.json:
        out = result.to_json()
        if bands:
            out["band_p10_p50_p90"] = {m: list(v) for m, v in bands.items()}
        print(json.dumps(out, indent=2))
    else:
        print_result(result)  # a training / RL step, or a serving benchmark
        if bands:
            basis = (f"calibration {args.calibration}" if cal is not None and cal.names
                     else "zero-shot spread of each component (not calibrated)")
            print(f"P10-P90 from the {basis}:")
            serve = run_spec.kind == "serve"
            for m, (lo, mid, hi) in bands.items():
                if m in PHASE_BAND_METRICS or serve:
                    print(f"  {m:<24} {lo:12.4g} {mid:12.4g} {hi:12.4g}")
        if args.trace:
            print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    return 0
