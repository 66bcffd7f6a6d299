"""A Miles launch as text a person can paste: the Ray cluster commands, the job submission, the runtime env and the
notes (what `executor launch --plan P --dry-run` prints)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from executor.backends.miles.launch import MODEL_ARGS_PLACEHOLDER, MilesLaunch
from perfmodel.errors import inert


def _word(tok: str) -> str:
    """Shell-quote a token, leaving `$VAR`, `$VAR:port` and the MODEL_ARGS array reference to the shell."""
    if tok == MODEL_ARGS_PLACEHOLDER:
        return f'"{tok}"'
    if tok.startswith("$") and tok[1:].replace("_", "").replace(":", "").isalnum():
        return tok
    return shlex.quote(tok)


def _cmd(argv: Sequence[str], indent: str = "  ") -> str:
    """One command, a flag and its values per line."""
    lines: list[list[str]] = [[]]
    for tok in argv:
        if tok.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(_word(tok))
    return (" \\\n" + indent).join(" ".join(x) for x in lines)


def render_dry_run(launch: MilesLaunch, plan_path: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The launch as text: the Ray cluster commands, the job submission, the runtime env and the notes."""
    env = launch.runtime_env_vars
    out: list[str] = []
    shown_path = f" ({inert(plan_path, keep_lines=False)})" if plan_path else ""
    out.append(f"# Miles launch of plan {launch.plan_id}{shown_path}"
               + f": run {launch.run_id}, entry point {launch.entry_point}")
    out.append(f"# {launch.num_nodes} node(s) x {launch.gpus_per_node} GPUs; run the ray start lines in the "
               "training image on each node, then the submission on the head node.")
    out.append("")
    out.append("# 1. Ray head node")
    out.append(_cmd(launch.ray_head))
    if launch.num_nodes > 1:
        out.append(f"# 2. Each of the {launch.num_nodes - 1} worker node(s)")
        out.append(_cmd(launch.ray_worker))
    out.append("")
    out.append("# 3. On the head node: the Megatron model arguments, then the job")
    if launch.passthrough_env:
        out.append("# copied into the runtime env from this shell when set: " + " ".join(launch.passthrough_env))
    out.append(launch.model_args.shell_setup())
    out.append(_cmd(launch.submit_argv))
    out.append("")
    out.append("# Runtime env (env_vars of --runtime-env-json), one per line:")
    shown = launch.resolved_env(environ) if environ is not None else env
    for k in sorted(shown):
        out.append(inert(f"#   {k}={shown[k]}", keep_lines=False))
    if launch.notes:
        out.append("")
        out.append("# Notes:")
        out.extend(inert(f"#   - {n}", keep_lines=False) for n in launch.notes)
    return "\n".join(out) + "\n"
