"""Run one `executor align` session and several comparisons in a process of its own (the session applies the CPU
shims and joins a process group: nothing a test process should keep), and write the results as JSON.

    python tests/executor/align_driver.py PLAN OUT.json --precision bf16 [--fp8-block 64] [--trainer-set '{"k": v}' ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("out", type=Path)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--fp8-block", type=int, default=128)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--trainer-set", action="append", default=[], type=json.loads)
    args = ap.parse_args()
    from executor.align.run import AlignSession

    session = AlignSession.start(args.plan, precision=args.precision, samples=args.samples, fp8_block=args.fp8_block,
                                 work_dir=args.out.parent / "work")
    try:
        results = [{"trainer_set": over, **session.compare(trainer_overrides=over or None).to_json()}
                   for over in [{}, *args.trainer_set]]
    finally:
        session.close()
    args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
