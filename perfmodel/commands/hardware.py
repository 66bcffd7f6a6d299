"""`perfmodel hardware`: list hardware profiles, or show one with the source of every number."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    hw = sub.add_parser("hardware", help="list hardware profiles, or show one with its sources",
                        description="Show hardware profiles (hwprofiles/*.yaml); with an id, every number's source.")
    hw.add_argument("id", nargs="?", help="a hardware id or a path to a profile YAML")
    hw.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfmodel.inputs.hardware import known_hardware_ids, load_hardware

    ids = [args.id] if args.id else known_hardware_ids()
    for hw_id in ids:
        hw = load_hardware(hw_id, field="id")
        bf16 = hw.peak("bf16") / 1e12
        fp8 = hw.peak("fp8") / 1e12
        print(f"{hw.id:10s} {hw.name:28s} bf16 {bf16:7.0f} TF  fp8 {fp8:7.0f} TF  HBM {hw.hbm_bytes / 1e9:5.0f} GB "
              f"@ {hw.hbm_bandwidth_bytes_per_s / 1e12:4.2f} TB/s  {hw.gpus_per_node}/node "
              f"{hw.scale_up_topology} {hw.scale_up_gpu_bytes_per_s / 1e9:5.0f} GB/s  "
              f"NIC {hw.nic_bytes_per_s / 1e9:4.0f} GB/s")
        if args.id:
            for key, src in sorted(hw.sources.items()):
                print(f"    {key}: {src}")
    return 0
