"""Checkpoints of a local run, and where a resumed run starts.

`<run_dir>/checkpoints/step-000010/` holds one `rank-NN.pt` per torchrun rank (its megatron-core model shard and
optimizer state, the critic's for PPO, its torch RNG) and `meta.json` (the step, the world size, rank 0's prompt
sampler state: the rollout's data cursor). Every file is written under a temporary name and renamed; `meta.json` is
written last, by rank 0, after every rank has renamed its file: a checkpoint is complete exactly when it has
`meta.json`, so a kill at any point leaves the previous complete checkpoint as it was. Older ones are removed only
after a newer one is complete.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DIR = re.compile(r"^step-(\d{6})$")
META = "meta.json"


@dataclass(frozen=True)
class CheckpointRef:
    step: int
    path: Path
    meta: dict[str, Any]


def checkpoints_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def step_dir(run_dir: Path, step: int) -> Path:
    return checkpoints_dir(run_dir) / f"step-{step:06d}"


def rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank:02d}.pt"


def complete_checkpoints(run_dir: Path) -> list[CheckpointRef]:
    """Every complete checkpoint of the run, oldest first (a folder without meta.json is a write cut short)."""
    root = checkpoints_dir(run_dir)
    out = []
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        m = _DIR.match(entry.name)
        if m and (entry / META).is_file():
            try:
                meta = json.loads((entry / META).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if all(rank_file(entry, r).is_file() for r in range(int(meta.get("world_size", 0)))):
                out.append(CheckpointRef(int(m.group(1)), entry, meta))
    return out


def latest_checkpoint(run_dir: Path) -> CheckpointRef | None:
    done = complete_checkpoints(run_dir)
    return done[-1] if done else None


def _atomic_write_bytes(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_rank(folder: Path, rank: int, state: dict[str, Any]) -> None:
    """This rank's share: written to a temporary name, synced, renamed."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    _atomic_write_bytes(rank_file(folder, rank), lambda f: torch.save(state, f))


def seal(folder: Path, meta: dict[str, Any], keep: int) -> None:
    """Rank 0, once every rank's file is in place: write meta.json (the checkpoint is now complete), then drop all
    but the newest `keep` complete checkpoints and any older folder left incomplete."""
    _atomic_write_bytes(folder / META, lambda f: f.write(json.dumps(meta, indent=2).encode() + b"\n"))
    done = complete_checkpoints(folder.parent.parent)
    kept = {c.path for c in done[-keep:]}
    newest = done[-1].step if done else 0
    for entry in checkpoints_dir(folder.parent.parent).iterdir():
        m = _DIR.match(entry.name)
        if m and entry not in kept and int(m.group(1)) <= newest:
            shutil.rmtree(entry, ignore_errors=True)


def load_rank(folder: Path, rank: int) -> dict[str, Any]:
    import torch

    return torch.load(rank_file(folder, rank), map_location="cpu", weights_only=True)


def weights_digest(trainer: Any) -> float:
    """A float64 sum over the model's weights: equal before the save and after the restore, or the restore failed."""
    return float(sum(t.double().sum() for t in trainer.model.state_dict().values() if hasattr(t, "double")))


def model_state(trainer: Any) -> dict[str, Any]:
    """What a trainer needs to continue exactly: its model shard and optimizer state (FP32 main weights, Adam
    moments, step counts), and the digest its restore is checked against."""
    return {"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
            "digest": weights_digest(trainer)}


def restore_model_state(trainer: Any, state: dict[str, Any], where: Path) -> None:
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    if "digest" in state and weights_digest(trainer) != state["digest"]:
        raise RuntimeError(f"{where}: the restored weights differ from the saved ones (digest "
                           f"{weights_digest(trainer)!r} != {state['digest']!r})")


def save(run_dir: Path, step: int, rank: int, world: int, trainer: Any, critic: Any, sampler: random.Random,
         run_id: str, keep: int) -> tuple[Path, int]:
    """A collective: every rank writes its share, then rank 0 seals the checkpoint. Returns (folder, bytes on
    disk; 0 off rank 0)."""
    import torch
    import torch.distributed as dist

    folder = step_dir(run_dir, step)
    state = {"actor": model_state(trainer), "torch_rng": torch.get_rng_state()}
    if critic is not None:
        state["critic"] = model_state(critic)
    save_rank(folder, rank, state)
    dist.barrier()
    if rank != 0:
        return folder, 0
    seal(folder, {"step": step, "world_size": world, "run_id": run_id, "sampler_state": list(sampler.getstate())},
         keep)
    return folder, sum(f.stat().st_size for f in folder.iterdir())


def restore(resume: dict[str, Any] | None, rank: int, world: int, trainer: Any, critic: Any) -> tuple[int, Any]:
    """A resumed run: this rank's model, optimizer and RNG from the checkpoint the job names. Returns (the first
    step to run, rank 0's prompt sampler state); (1, None) for a fresh run."""
    import torch

    if not resume:
        return 1, None
    folder = Path(resume["checkpoint"])
    meta = json.loads((folder / META).read_text(encoding="utf-8"))
    if meta["world_size"] != world:
        raise RuntimeError(f"{folder}: written by {meta['world_size']} ranks, resumed with {world}")
    state = load_rank(folder, rank)
    restore_model_state(trainer, state["actor"], folder)
    if critic is not None:
        restore_model_state(critic, state["critic"], folder)
    torch.set_rng_state(state["torch_rng"])
    version, internal, gauss = meta["sampler_state"]
    return int(meta["step"]) + 1, (version, tuple(internal), gauss)
