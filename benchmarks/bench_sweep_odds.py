"""What the ranking's odds and the settling measurement add to the default sweep (issue 24 target: the sweep with
them at most 1.5x the sweep without). One run of `perfmodel.api.sweep` on the default sweep file (no cache, no
report), with the time spent in the odds (`add_odds`: the top plans re-priced under joint draws) and in the
settling measurement (`settling_measurement`, and the pricing of its smaller launches in `small_scale`) taken
out of the whole. Prints the numbers; asserts nothing (timing
is noisy: compare the ratio within the run).

    python benchmarks/bench_sweep_odds.py                                      # the default (RL) sweep
    python benchmarks/bench_sweep_odds.py tests/data/gpt3-175b-a100-sweep.yaml  # a pretraining sweep: one parameter
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.api import sweep
from perfmodel.sweep import odds, settle, small_scale
from perfmodel.sweep.spec import default_sweep_path

SPENT = {"odds": 0.0, "settle": 0.0, "smaller": 0.0}


def _timed(name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - t0
    return wrapper


def main(argv: list[str]) -> None:
    path = Path(argv[0]) if argv else default_sweep_path()
    odds.add_odds = _timed("odds", odds.add_odds)  # folder.py imports both when it runs: it gets these
    settle.settling_measurement = _timed("settle", settle.settling_measurement)
    small_scale.smallest_version = _timed("smaller", small_scale.smallest_version)
    small_scale.one_engine_version = _timed("smaller", small_scale.one_engine_version)
    small_scale.weight_update_version = _timed("smaller", small_scale.weight_update_version)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        ranking = sweep(path, out=Path(d) / "s", cache=False, report=False)
        whole = time.perf_counter() - t0
    without = whole - sum(SPENT.values())
    print(f"{path.name}: {ranking.candidates:,} candidates, {len(ranking.top)} top plans, {whole:.1f} s in all")
    print(f"odds (p_best, tie groups) {SPENT['odds']:.2f} s, settling measurement {SPENT['settle']:.3f} s, its "
          f"smaller launches priced {SPENT['smaller']:.2f} s")
    print(f"with them / without them: {whole / without:.2f}x (target <= 1.5x)")
    if ranking.settle:
        print(f"settle: {ranking.settle['command']} (p best {ranking.settle['p_best_now']:.2f} -> "
              f"{ranking.settle['p_best_after']:.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
