"""A real single-node Ray head on loopback for tests: its own temp dir, every port picked free, stopped by pid
(never `ray stop`, which kills every Ray process on the machine by name)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class RayHead:
    dashboard: str  # http://127.0.0.1:PORT (Job SDK)
    gcs: str  # 127.0.0.1:PORT (ray.init)
    temp_dir: Path


def _free_ports(count: int, avoid: range) -> list[int]:
    """`count` distinct free ports, none inside `avoid` (the worker range): the OS hands out ports from the
    same ephemeral range the worker range is drawn from, and Ray refuses a component port inside it."""
    ports: list[int] = []
    for _ in range(count * 50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid and port not in ports:
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError("no free ports")


def _free_range(width: int = 64) -> tuple[int, int]:
    for _ in range(50):
        lo = random.randrange(30000, 60000 - width)
        ok = True
        for p in range(lo, lo + width):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return lo, lo + width - 1
    raise RuntimeError("no free port range")


def _stop_tree(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """Stop a process we started and all its descendants, by pid only. A throwaway head needs no clean shutdown:
    one of its processes ignores SIGTERM and took the whole grace (10 s) before its SIGKILL."""
    import psutil

    try:
        root = psutil.Process(proc.pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the session we created for it, if anything is left there
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=5)


@pytest.fixture(scope="module")  # one head per test module: starting and stopping one costs about 8 s
def ray_head():
    pytest.importorskip("psutil")
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_bin is None:
        pytest.skip("ray CLI not found")
    temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's unix socket paths must stay < 108 chars
    lo, hi = _free_range()
    dash, gcs_port, client, node_mgr, obj_mgr, metrics, agent_http, agent_grpc, runtime_env = _free_ports(
        9, avoid=range(lo, hi + 1))
    cmd = [ray_bin, "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(gcs_port), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
           "--ray-client-server-port", str(client), "--node-manager-port", str(node_mgr),
           "--object-manager-port", str(obj_mgr), "--metrics-export-port", str(metrics),
           "--dashboard-agent-listen-port", str(agent_http), "--dashboard-agent-grpc-port", str(agent_grpc),
           "--runtime-env-agent-port", str(runtime_env), "--min-worker-port", str(lo), "--max-worker-port", str(hi),
           "--num-cpus", "1", "--num-gpus", "0", "--object-store-memory", str(100 * 1024 * 1024),
           "--disable-usage-stats", "--temp-dir", temp_dir]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
    env.pop("RAY_ADDRESS")
    log_path = Path(temp_dir) / "ray-start.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{address}/api/version", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Ray dashboard did not come up:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield RayHead(address, f"127.0.0.1:{gcs_port}", Path(temp_dir))
    finally:
        _stop_tree(proc)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


