"""Sweep memory against the space's size (issue 25: a sweep of any size costs at most 2 GB, its memory bounded
independently of the space): `perfmodel sweep` on three spaces of the default DSV4-Flash sweep, 6 thousand to about
200 thousand candidates, each run whole (no cache, two workers, the capacity report included), its process tree's
memory sampled every 0.2 s. Prints the numbers; asserts nothing (timing and memory vary by host).

    python benchmarks/bench_sweep_memory.py [--sizes small,medium,wide] [--workers 2]

PSS (proportional set size) counts a page shared by the parent and its forked workers once, split between them: the
tree's PSS is what the sweep costs the machine. The parent's peak RSS is its own high-water mark (VmHWM).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.model import load_model
from perfmodel.sweep.space import count_candidates
from perfmodel.sweep.spec import SweepSpec, default_sweep_path, load_sweep_spec, parse_nodes

CLI = "import sys; from perfmodel.cli import main; sys.exit(main(sys.argv[1:]))"
# name: (node counts, space fields replaced)
SIZES = {
    "small": ("4", {}),
    "medium": ("4-64", {}),
    "wide": ("4-512", {"rollout_fraction": [0.125, 0.25, 0.5, 0.75, 0.875]}),
}


def _spec(name: str) -> SweepSpec:
    nodes, space = SIZES[name]
    spec = load_sweep_spec(default_sweep_path())
    return spec.model_copy(update={"nodes": parse_nodes(nodes),
                                   "space": spec.space.model_copy(update={k: tuple(v) for k, v in space.items()})})


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc's children lists)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _field_kb(path: str, name: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def measure(name: str, workers: int) -> dict[str, float]:
    spec = _spec(name)
    hw, model = load_hardware(spec.hardware), load_model(spec.model.id)
    total = count_candidates(spec, hw.gpus_per_node, 256, model.num_layers)
    with tempfile.TemporaryDirectory() as d:
        spec_path = Path(d) / "sweep.yaml"
        spec_path.write_text(yaml.safe_dump(spec.model_dump(mode="json", by_alias=True)))
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", CLI, "sweep", str(spec_path), "--out",
                                 str(Path(d) / "out"), "--no-cache", "--workers", str(workers)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak_pss_kb = peak_rss_kb = 0
        while proc.poll() is None:
            peak_pss_kb = max(peak_pss_kb, sum(_field_kb(f"/proc/{p}/smaps_rollup", "Pss") for p in _tree(proc.pid)))
            peak_rss_kb = max(peak_rss_kb, _field_kb(f"/proc/{proc.pid}/status", "VmHWM"))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode:
            raise SystemExit(f"{name}: sweep exited {proc.returncode}: {err.strip()[-300:]}")
    return {"candidates": total, "wall_s": wall, "tree_pss_gb": peak_pss_kb / 1e6, "parent_rss_gb": peak_rss_kb / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="small,medium,wide")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print(f"{'space':8} {'candidates':>10} {'wall s':>7} {'tree PSS GB':>11} {'parent RSS GB':>13}")
    for name in args.sizes.split(","):
        m = measure(name, args.workers)
        print(f"{name:8} {m['candidates']:>10,} {m['wall_s']:>7.1f} {m['tree_pss_gb']:>11.2f} "
              f"{m['parent_rss_gb']:>13.2f}", flush=True)
    print("target: at most 2 GB for a sweep of any size (tree PSS), and no growth with the space's size")


if __name__ == "__main__":
    main()
