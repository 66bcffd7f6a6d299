"""Summarize `perfmodel validate --json` over the Megatron-Bridge development set: error of tokens/s/GPU by GPU and
model, one column per NeMo release, and the mean absolute error overall, dense vs MoE, and per release.

    perfmodel validate studies/validation/mbridge-archive/cases --json > /tmp/dev.json
    python studies/validation/mbridge-archive/summarize.py /tmp/dev.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict

CASE_ID = re.compile(r"^mb(?P<release>[\d.]+)-(?P<hw>.+?)-(?P<model>llama3-8b|llama3-70b|llama3\.1-405b|deepseek-v3|"
                     r"deepseek-v4-flash|gpt-oss-120b|qwen3-30b-a3b|qwen3-235b-a22b)-")


def main(path: str) -> None:
    report = json.load(open(path))
    rows = [c for c in report["cases"] if c["metric"] == "tokens_per_s_per_gpu" and c.get("rel_error") is not None]
    groups: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    by_release: dict[str, list[float]] = defaultdict(list)
    dense, moe = [], []
    for c in rows:
        m = CASE_ID.match(c["id"])
        if not m:
            continue
        err = c["rel_error"]
        groups[(m["hw"], m["model"])].append((m["release"], err))
        by_release[m["release"]].append(abs(err))
        (dense if m["model"].startswith("llama") else moe).append(abs(err))
    print("| GPU | model | n | mean error | errors by NeMo release |")
    print("|---|---|---:|---:|---|")
    for (hw, model), v in sorted(groups.items()):
        mean = sum(e for _, e in v) / len(v)
        print(f"| {hw} | {model} | {len(v)} | {mean:+.0%} | " + " ".join(f"{r}: {e:+.0%}" for r, e in sorted(v)) + " |")
    everything = dense + moe
    print()
    print(f"tokens/s/GPU over {len(everything)} runs: mean |error| {sum(everything) / len(everything):.1%}; "
          f"dense {sum(dense) / len(dense):.1%} (n={len(dense)}), MoE {sum(moe) / len(moe):.1%} (n={len(moe)}); "
          f"within 25%: {sum(e <= 0.25 for e in everything)}; not predicted: {len(report['failed'])}")
    print("by release: " + ", ".join(f"{r} {sum(v) / len(v):.0%} (n={len(v)})" for r, v in sorted(by_release.items())))


if __name__ == "__main__":
    main(sys.argv[1])
