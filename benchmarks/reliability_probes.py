"""Issue 25's probes, run as a careful new user would (each a subprocess with a time and memory limit): Ctrl-C,
two terminals, kill, damaged files, hostile YAML, pasted commands. Prints one row per probe: its class, what
happened (rc, seconds, the last stderr line) and whether that is acceptable (a clear line or a usable result within
the time limit; never a traceback, a hang, an injected command or a half-written file taken as whole).

    python benchmarks/reliability_probes.py [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(os.environ.get("PROBE_ROOT") or Path(__file__).resolve().parent.parent)  # PROBE_ROOT: another checkout
MEMORY_LIMIT_BYTES = 3 * 2**30  # a probe past this is a failure (target: 2 GB of real use; address space is larger)
PLAN = ROOT / "examples" / "local-grpo.yaml"
SWEEP_BASE = """hardware: mi355x
stack: miles
model: {id: deepseek-v4-flash}
nodes: [4]
job:
  kind: rl
  train: {precision: bf16, seq_len: 16384, global_batch: 256, micro_batch: 1, max_tokens_per_gpu: 8192}
  rl:
    algorithm: grpo
    prompts_per_step: 32
    samples_per_prompt: 8
    prompt_tokens_mean: 140
    response_tokens: {max: 4096, mean: 3020}
    rollout: {precision: fp8}
"""
ALIAS_BOMB = """a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
"""


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a terminal starts a command, even from a background script


class Probe:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.env = {**os.environ, "PERFMODEL_CACHE_DIR": str(work / "cache"), "PYTHONPATH": str(ROOT)}

    def start(self, cmd: str) -> subprocess.Popen:
        return subprocess.Popen(cmd, shell=True, cwd=self.work, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=_limit)

    def run(self, cmd: str, timeout_s: float = 20.0) -> tuple[int | None, float, str, str]:
        t0 = time.perf_counter()
        p = self.start(cmd)
        try:
            out, err = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return None, time.perf_counter() - t0, out, err
        return p.returncode, time.perf_counter() - t0, out, err


def verdict(rc: int | None, wall_s: float, err: str, *, want_rc: tuple[int, ...] = (2,)) -> tuple[bool, str]:
    last = (err.strip().splitlines() or [""])[-1][:110]
    if rc is None:
        return False, f"hang (> {wall_s:.0f} s)"
    if "Traceback" in err:
        return False, f"traceback rc {rc}: {last}"
    return rc in want_rc, f"rc {rc} {wall_s:.1f} s: {last}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


PM = f"{shlex.quote(sys.executable)} -m perfmodel.cli"
EX = f"{shlex.quote(sys.executable)} -m executor"


def p_ctrl_c(pr: Probe) -> tuple[bool, str]:
    """1. Ctrl-C during a two-worker sweep, then `perfmodel report` on its folder."""
    p = pr.start(f"exec {PM} sweep --nodes 4-64 --workers 2 --out cc --no-report")
    time.sleep(9)
    os.killpg(p.pid, signal.SIGINT)
    try:
        _, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        return False, "sweep hung after Ctrl-C"
    rc2, wall, _, err2 = pr.run(f"{PM} report cc --out cc/r.html")
    ok = p.returncode == 130 and "Traceback" not in err and rc2 == 0 and "interrupt" in (_ + err2).lower()
    return ok, f"sweep rc {p.returncode}{' traceback' if 'Traceback' in err else ''}; report rc {rc2}: " \
        f"{(err2.strip().splitlines() or [''])[-1][:80]}"


def p_alias_plan(pr: Probe) -> tuple[bool, str]:
    """2. Alias bomb under a plan's model.hf_config."""
    text = PLAN.read_text().replace("model:\n  hf_config:\n", "model:\n  hf_config:\n" + "".join(
        "    " + line + "\n" for line in ALIAS_BOMB.splitlines()))
    write(pr.work / "bomb.yaml", text)
    return _both(pr, [f"{PM} simulate bomb.yaml", f"{PM} check bomb.yaml"])


def _both(pr: Probe, cmds: list[str], timeout_s: float = 30) -> tuple[bool, str]:
    """Every command must end acceptably (exit 2, one line); the first that does not is reported."""
    results = [verdict(*(r := pr.run(c, timeout_s))[:2], r[3]) for c in cmds]
    return next(((ok, t) for ok, t in results if not ok), results[0])


def p_alias_sweep(pr: Probe) -> tuple[bool, str]:
    """2. Alias bomb under a sweep file's stack_options."""
    write(pr.work / "bs.yaml", SWEEP_BASE + "stack_options:\n" + "".join(
        "  " + line + "\n" for line in ALIAS_BOMB.splitlines()))
    rc, wall, _, err = pr.run(f"{PM} sweep bs.yaml --out bs --no-report", 30)
    return verdict(rc, wall, err)


def p_wide_space(pr: Probe) -> tuple[bool, str]:
    """3. A sweep space listing every option."""
    write(pr.work / "wide.yaml", SWEEP_BASE.replace("nodes: [4]", "nodes: [1, 2, 4, 8, 16, 32, 64, 128]") + """space:
  tp: [1, 2, 4, 8, 16, 32]
  pp: [1, 2, 3, 4, 6, 8, 12, 16]
  cp: [1, 2, 4, 8]
  ep: [1, 2, 4, 8, 16, 32, 64, 128, 256]
  etp: [1, 2, 4, 8]
  vpp: [1, 2, 3, 4]
  recompute: [none, selective, full]
  moe_dispatcher: [alltoall, deepep]
  optimizer_offload_fraction: [0.0, 0.25, 0.5, 0.75, 1.0]
  async: [false, true]
  rollout_fraction: [0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875]
  weight_update_disaggregated: [broadcast, p2p]
  engine_gpus: [1, 2, 4, 8, 16, 32, 64]
  engine_ep: [none, full]
  dp_attention: [false, true]
""")
    rc, wall, out, err = pr.run(f"{PM} sweep wide.yaml --out wide --no-report --no-cache", 60)
    return verdict(rc, wall, err, want_rc=(0, 2))


def p_quoting(pr: Probe) -> tuple[bool, str]:
    """4. The printed `next:` commands, pasted, with an --out holding $(...)."""
    rc, wall, out, err = pr.run(f"{PM} sweep --nodes 4 --out 'runs/a $(touch pwned)' --no-report", 60)
    lines = [ln.strip().split("  (")[0] for ln in out.splitlines() if ln.strip().startswith("executor launch")]
    if rc != 0 or not lines:
        return False, f"sweep rc {rc}: {(err.strip().splitlines() or [''])[-1][:80]}"
    subprocess.run(f"echo {lines[0]}", shell=True, cwd=pr.work, capture_output=True)  # a paste, harmlessly echoed
    pwned = (pr.work / "pwned").exists()
    return not pwned, "pasted command ran $(touch pwned)" if pwned else f"quoted: {lines[0][:70]}"


def _cache_sweep(pr: Probe, damage: Callable[[Path], None], name: str) -> tuple[int | None, float, str, str]:
    pr.run(f"{PM} sweep --nodes 4 --out {name}0 --no-report", 60)
    damage(pr.work / "cache" / "results.sqlite")
    return pr.run(f"{PM} sweep --nodes 4 --out {name}1 --no-report", 60)


def p_cache_truncated(pr: Probe) -> tuple[bool, str]:
    """5. A results.sqlite truncated to half."""
    def damage(p: Path) -> None:
        for side in (p, p.with_name(p.name + "-wal")):
            if side.exists():
                side.write_bytes(side.read_bytes()[: side.stat().st_size // 2])
    return _v0(_cache_sweep(pr, damage, "ct"))


def _v0(res: tuple[int | None, float, str, str]) -> tuple[bool, str]:
    rc, wall, _, err = res
    return verdict(rc, wall, err, want_rc=(0,))


def p_cache_garbage(pr: Probe) -> tuple[bool, str]:
    """5. A results.sqlite overwritten with garbage."""
    return _v0(_cache_sweep(pr, lambda p: p.write_bytes(b"not a database" * 100), "cg"))


def p_cache_scaled(pr: Probe) -> tuple[bool, str]:
    """5. A cached row that is plausible but wrong: its step time x0.01."""
    def damage(p: Path) -> None:
        import json
        db = sqlite3.connect(p)
        for key, row in db.execute("SELECT key, row FROM results").fetchall():
            r = json.loads(row)
            if r.get("status") == "ok":
                r["step_time_s"] *= 0.01
                db.execute("UPDATE results SET row = ? WHERE key = ?", (json.dumps(r), key))
        db.commit()
        db.close()
    rc, wall, out, err = _cache_sweep(pr, damage, "cs")
    import json
    try:
        top = json.loads((pr.work / "cs1" / "summary.json").read_text())["top"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return verdict(rc, wall, err, want_rc=(0,))
    first = json.loads((pr.work / "cs0" / "summary.json").read_text())["top"][0]
    step = {r["index"]: float(r["step_time_s"] or 0) for r in _csv(pr.work / "cs1" / "candidates.csv")}[top["index"]]
    step0 = {r["index"]: float(r["step_time_s"] or 0) for r in _csv(pr.work / "cs0" / "candidates.csv")}[first["index"]]
    ok = abs(step - step0) <= 0.01 * step0
    return ok, f"rc {rc}: best step {step:.2f} s, undamaged {step0:.2f} s" + ("" if ok else " (a damaged row ranked)")


def _csv(path: Path) -> list[dict]:
    import csv
    with path.open() as f:
        return [dict(r, index=int(r["index"])) for r in csv.DictReader(f)]


def p_cache_wrong_shape(pr: Probe) -> tuple[bool, str]:
    """5. A cached row of the wrong shape."""
    def damage(p: Path) -> None:
        db = sqlite3.connect(p)
        db.execute("UPDATE results SET row = '[1, 2]'")
        db.commit()
        db.close()
    return _v0(_cache_sweep(pr, damage, "cw"))


def p_two_sweeps(pr: Probe) -> tuple[bool, str]:
    """6. Two sweeps into one --out at once."""
    a = pr.start(f"{PM} sweep --nodes 4 --out same --no-report --no-cache")
    b = pr.start(f"{PM} sweep --nodes 8 --out same --no-report --no-cache")
    a.communicate(timeout=120)
    b.communicate(timeout=120)
    both = a.returncode == 0 and b.returncode == 0
    return not both, f"rc {a.returncode} and {b.returncode}" + (": both claimed the folder" if both else "")


def p_orphans(pr: Probe) -> tuple[bool, str]:
    """7. kill -9 on a two-worker sweep: are its workers left?"""
    p = pr.start(f"exec {PM} sweep --nodes 4-64 --workers 2 --out orph --no-report --no-cache")
    time.sleep(8)
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()  # not communicate(): orphaned workers would hold its pipes open for good
    time.sleep(3)
    alive = [k for k in kids if Path(f"/proc/{k}").exists()]
    for k in alive:
        os.kill(int(k), signal.SIGKILL)
    return not alive and bool(kids), f"{len(kids)} workers, {len(alive)} left alive"


def p_job_typo(pr: Probe) -> tuple[bool, str]:
    """8. job.train.seq_lenn in a sweep file."""
    write(pr.work / "typo.yaml", SWEEP_BASE.replace("seq_len:", "seq_lenn:"))
    return _both(pr, [f"{PM} sweep typo.yaml --out typo --no-report --no-cache"], 60)


def p_huge_batch(pr: Probe) -> tuple[bool, str]:
    """9. global_batch 100000000 in a plan."""
    write(pr.work / "gb.yaml", PLAN.read_text().replace("global_batch: 256", "global_batch: 100000000"))
    rc, wall, _, err = pr.run(f"{PM} simulate gb.yaml", 30)
    return verdict(rc, wall, err)


def p_huge_layers(pr: Probe) -> tuple[bool, str]:
    """9. num_hidden_layers 1e9 in a plan, through `check`."""
    write(pr.work / "nl.yaml", PLAN.read_text().replace("num_hidden_layers: 2", "num_hidden_layers: 1000000000"))
    rc, wall, _, err = pr.run(f"{PM} check nl.yaml", 30)
    return verdict(rc, wall, err)


def p_big_yaml(pr: Probe) -> tuple[bool, str]:
    """9. A 60 MB YAML."""
    with (pr.work / "big.yaml").open("w") as f:
        f.write(PLAN.read_text())
        f.write("junk:\n")
        for i in range(2_000_000):
            f.write(f"  k{i}: 123456789012345678901\n")
    rc, wall, _, err = pr.run(f"{PM} simulate big.yaml", 30)
    return verdict(rc, wall, err)


def _store(pr: Probe) -> Path:
    store = pr.work / "store.sqlite"
    db = sqlite3.connect(store)
    db.close()
    return store


def p_store_folder(pr: Probe) -> tuple[bool, str]:
    """10. An executor store path that is a folder."""
    (pr.work / "sdir").mkdir(exist_ok=True)
    rc, wall, _, err = pr.run(f"{EX} runs --store sdir", 30)
    return verdict(rc, wall, err)


def p_store_garbage(pr: Probe) -> tuple[bool, str]:
    """10. An executor store overwritten with garbage."""
    write(pr.work / "bad.sqlite", "garbage " * 1000)
    rc, wall, _, err = pr.run(f"{EX} runs --store bad.sqlite", 30)
    return verdict(rc, wall, err)


def p_out_readonly(pr: Probe) -> tuple[bool, str]:
    """11. An --out folder that cannot be written: found before the work?"""
    if os.geteuid() == 0:  # root writes through permissions: /proc/self is a folder nobody can create files in
        out = "/proc/self"
    else:
        (pr.work / "ro").mkdir(exist_ok=True)
        (pr.work / "ro").chmod(0o555)
        out = "ro"
    rc, wall, _, err = pr.run(f"{PM} sweep --nodes 4-16 --out {out} --no-report --no-cache", 60)
    ok, text = verdict(rc, wall, err)
    return ok and wall < 10, text


def p_out_file(pr: Probe) -> tuple[bool, str]:
    """11. --out naming a file."""
    write(pr.work / "afile", "x")
    return _both(pr, [f"{PM} sweep --nodes 4 --out afile --no-report"], 60)


def p_trace_missing(pr: Probe) -> tuple[bool, str]:
    """11. simulate --trace into a missing folder."""
    rc, wall, _, err = pr.run(f"{PM} simulate {PLAN} --trace nope/t.json", 30)
    return verdict(rc, wall, err, want_rc=(0, 2))


def p_markup(pr: Probe) -> tuple[bool, str]:
    """12. A hardware id holding rich markup ([/], [link=...])."""
    text = (ROOT / "hwprofiles" / "cpu-local.yaml").read_text()
    write(pr.work / "hw.yaml", "\n".join('id: "cpu[/]x [link=https://e.vil]y"' if ln.startswith("id:") else ln
                                         for ln in text.splitlines()))
    rc, wall, out, err = pr.run(f"{PM} simulate {PLAN} --hardware hw.yaml", 30)
    ok, line = verdict(rc, wall, err, want_rc=(0, 2))
    return ok and "cpu[/]x [link=https://e.vil]y" in out, line if not ok else f"rc {rc}: printed as typed"


def p_space_zero(pr: Probe) -> tuple[bool, str]:
    """13. tp: [0] in a sweep space."""
    write(pr.work / "z.yaml", SWEEP_BASE + "space: {tp: [0]}\n")
    return _both(pr, [f"{PM} sweep z.yaml --out z --no-report --no-cache"])


def p_space_nan(pr: Probe) -> tuple[bool, str]:
    """13. rollout_fraction: [.nan] in a sweep space."""
    write(pr.work / "n.yaml", SWEEP_BASE + "space: {rollout_fraction: [.nan]}\n")
    rc, wall, _, err = pr.run(f"{PM} sweep n.yaml --out n --no-report --no-cache", 30)
    return verdict(rc, wall, err)


def p_dup_keys(pr: Probe) -> tuple[bool, str]:
    """1 (loader). A plan with a key given twice."""
    write(pr.work / "dup.yaml", PLAN.read_text().replace("    lr: 0.001\n", "    lr: 0.001\n    lr: 0.1\n", 1))
    rc, wall, _, err = pr.run(f"{PM} simulate dup.yaml", 30)
    return verdict(rc, wall, err)


PROBES: list[Callable[[Probe], tuple[bool, str]]] = [
    p_ctrl_c, p_alias_plan, p_alias_sweep, p_wide_space, p_quoting, p_cache_truncated, p_cache_garbage,
    p_cache_wrong_shape, p_cache_scaled, p_two_sweeps, p_orphans, p_job_typo, p_huge_batch, p_huge_layers,
    p_big_yaml, p_store_folder, p_store_garbage, p_out_readonly, p_out_file, p_trace_missing, p_markup,
    p_space_zero, p_space_nan, p_dup_keys,
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    passed = 0
    chosen = [p for p in PROBES if args.only in p.__name__]
    for probe in chosen:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            try:
                ok, text = probe(Probe(Path(d)))
            except Exception as err:
                ok, text = False, f"probe error: {type(err).__name__}: {err}"
            passed += ok
            doc = (probe.__doc__ or "").strip()
            print(f"{'ok  ' if ok else 'FAIL'} {time.perf_counter() - t0:5.1f}s  {doc[:60]:60s} {text}", flush=True)
    print(f"{passed} of {len(chosen)} probes acceptable")


if __name__ == "__main__":
    main()
