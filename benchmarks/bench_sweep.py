"""Sweep speed (issue 5 target): DSV4-Flash over 4 to 64 MI355X nodes must simulate >= 5,000 candidate plans
(after pruning, each a full RL-step simulation) in <= 60 s on a 2-core machine; a second run is served from the
result cache. Prints the numbers; asserts nothing (timing is noisy).

    python benchmarks/bench_sweep.py [--nodes 4-64] [--workers N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.inputs.hardware import load_hardware
from perfmodel.inputs.model import load_model
from perfmodel.sweep.cache import ResultCache
from perfmodel.sweep.run import evaluate_candidates
from perfmodel.sweep.space import enumerate_candidates
from perfmodel.sweep.spec import default_sweep_path, load_sweep_spec, parse_nodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="4-64")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    spec = load_sweep_spec(default_sweep_path()).model_copy(update={"nodes": parse_nodes(args.nodes)})
    hw, model = load_hardware(spec.hardware), load_model(spec.model.id)
    t0 = time.perf_counter()
    cands = list(enumerate_candidates(spec, hw.gpus_per_node, 256, model.num_layers))
    t_enum = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        cache = ResultCache(Path(d) / "results.sqlite")
        t1 = time.perf_counter()
        first = evaluate_candidates(spec, cands, hw, model, "dsv4", workers=args.workers, cache=cache)
        t_first = time.perf_counter() - t1
        t2 = time.perf_counter()
        second = evaluate_candidates(spec, cands, hw, model, "dsv4", workers=args.workers, cache=cache)
        t_second = time.perf_counter() - t2
        cache.close()
    print(f"nodes {list(spec.nodes)}: {len(cands):,} candidates enumerated in {t_enum:.1f} s")
    print(f"first run:  {first.evaluated:,} simulated + {first.pruned:,} pruned in {t_first:.1f} s "
          f"({(first.evaluated + first.pruned) / t_first:,.0f} candidates/s, {first.evaluated / t_first:,.0f} "
          f"simulated/s); target >= 5,000 simulated in <= 60 s")
    print(f"second run: {second.cached:,} from cache in {t_second:.1f} s")
    print(f"best: {first.top[0]['label']}  step {first.top[0]['step_time_s']:.1f} s")


if __name__ == "__main__":
    main()
