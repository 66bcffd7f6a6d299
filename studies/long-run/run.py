"""A 100-step local GRPO run (examples/local-grpo.yaml), and what it says: no stall, the reward's trend, memory flat,
the train/rollout log-prob gap every step.

    python studies/long-run/run.py                  # launch 100 steps into a fresh store here, then summarize
    python studies/long-run/run.py --steps 30       # shorter
    python studies/long-run/run.py --summarize-only # the tables and plot from the store already here
    python studies/long-run/run.py --summarize-only --store S.sqlite --out DIR  # of the newest run in another store

Writes `curves.csv` (per step: time, reward, gap, KL, the sampled tokens' mean log-prob, peak RSS of the trainer
and of SGLang's processes), `summary.json` (wall time, reward trend, RSS at step 10 vs the last step), `curves.html`
(plotly) and `curves.png` (kaleido, when a browser is found). `tests/executor/test_long_run.py` checks the same
figures on a 25-step run in CI.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PLAN = REPO / "examples" / "local-grpo.yaml"


def launch(steps: int, store: Path, run_dir: Path) -> float:
    """The run, as a user starts it; returns its wall time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "executor", "launch", "--plan", str(PLAN), "--steps", str(steps),
                    "--store", str(store), "--run-dir", str(run_dir)], check=True, env=env)
    return time.monotonic() - t0


def curves(steps: list[dict[str, Any]]) -> list[dict[str, float]]:
    out = []
    for s in steps:
        rss = s["peak_rss_bytes"]
        out.append({"step": s["step"], "step_s": s["phases_s"]["step"], "reward": s["reward_mean"],
                    "gap": s["train_rollout_logprob_abs_diff"], "kl": s["train_rollout_kl"],
                    "lp_mean": s["rollout_log_prob_mean"],
                    "trainer_rss_gib": max(v for k, v in rss.items() if k.startswith("rank")) / 2**30,
                    "engine_rss_gib": rss.get("engine", 0) / 2**30})
    return out


def summarize(rows: list[dict[str, float]], wall_s: float | None) -> dict[str, Any]:
    """Reward trend (first vs last tenth, and a least-squares slope), RSS at step 10 vs the last, stalls (a step
    over 10x the median: what a hang looks like, not a busy machine's slow step)."""
    n = len(rows)
    tenth = max(1, n // 10)

    def mean(key: str, part: list[dict[str, float]]) -> float:
        return statistics.fmean(r[key] for r in part)

    xs = [r["step"] for r in rows]
    slope = statistics.linear_regression(xs, [r["reward"] for r in rows]).slope if n > 1 else 0.0
    at10 = rows[min(9, n - 1)]
    median_step = statistics.median(r["step_s"] for r in rows)
    return {
        "steps": n, "wall_s": wall_s,
        "step_s_median": median_step, "step_s_max": max(r["step_s"] for r in rows),
        "steps_over_10x_median": sum(r["step_s"] > 10 * median_step for r in rows),
        "reward_first_tenth": mean("reward", rows[:tenth]), "reward_last_tenth": mean("reward", rows[-tenth:]),
        "reward_slope_per_100_steps": 100 * slope,
        "gap_first_tenth": mean("gap", rows[:tenth]), "gap_last_tenth": mean("gap", rows[-tenth:]),
        "gap_recorded_every_step": all(r["gap"] == r["gap"] for r in rows),  # no NaN
        "trainer_rss_gib_step10": at10["trainer_rss_gib"], "trainer_rss_gib_last": rows[-1]["trainer_rss_gib"],
        "engine_rss_gib_step10": at10["engine_rss_gib"], "engine_rss_gib_last": rows[-1]["engine_rss_gib"],
    }


def plot(rows: list[dict[str, float]], out_dir: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    x = [r["step"] for r in rows]
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, subplot_titles=(
        "reward (mean over the step's samples)", "train/rollout log-prob gap (mean |diff|)",
        "peak RSS (GiB)", "step time (s)"))
    fig.add_trace(go.Scatter(x=x, y=[r["reward"] for r in rows], name="reward"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r["gap"] for r in rows], name="gap"), row=2, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r["trainer_rss_gib"] for r in rows], name="trainer rank"), row=3, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r["engine_rss_gib"] for r in rows], name="SGLang processes"), row=3, col=1)
    fig.add_trace(go.Scatter(x=x, y=[r["step_s"] for r in rows], name="step"), row=4, col=1)
    fig.update_layout(height=900, width=900, title=f"{len(rows)} local GRPO steps ({PLAN.name})")
    fig.write_html(out_dir / "curves.html", include_plotlyjs="cdn")
    try:
        from perfmodel.report.png import export_pngs

        export_pngs({"curves": fig}, out_dir, width=900)
    except Exception as err:  # no browser for kaleido here: the HTML stands
        print(f"no PNG ({err})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--summarize-only", action="store_true")
    ap.add_argument("--store", type=Path, help="the executor store to launch into or read (default OUT/store.sqlite)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from executor.store import Store

    store_path, run_dir = args.store or args.out / "store.sqlite", args.out / "run"
    wall = None
    if not args.summarize_only:
        store_path.unlink(missing_ok=True)
        wall = launch(args.steps, store_path, run_dir / time.strftime("%Y%m%d-%H%M%S"))
    store = Store(store_path)
    run = store.runs()[-1]
    rows = curves(store.steps(run["run_id"]))
    store.close()
    with open(args.out / "curves.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = summarize(rows, wall) | {"run_id": run["run_id"], "status": run["status"]}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plot(rows, args.out)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
