"""How the local engine gets its processes on CPU (executor/backends/local/engine_processes.py): the environment
they see, the scheduler's environment carried across a fork, and a failing child's SIGQUIT reaching the engine's
process through the forkserver it was forked from."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from executor.backends.local.engine_processes import EXTERNAL_MODELS, SchedulerEntry, engine_environment
from tests.executor.test_local_launch import REPO, needs_stack


def test_the_engine_environment_drops_torchrun_and_names_our_models_only_for_ours(monkeypatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.delenv("SGLANG_EXTERNAL_MODEL_PACKAGE", raising=False)
    with engine_environment("LlamaForCausalLM"):
        assert "RANK" not in os.environ and "MASTER_PORT" not in os.environ
        assert "SGLANG_EXTERNAL_MODEL_PACKAGE" not in os.environ
    with engine_environment("Dsv4MiniForCausalLM"):
        assert os.environ["SGLANG_EXTERNAL_MODEL_PACKAGE"] == EXTERNAL_MODELS
    assert os.environ["RANK"] == "0" and os.environ["MASTER_PORT"] == "29500"  # restored
    assert "SGLANG_EXTERNAL_MODEL_PACKAGE" not in os.environ


def test_the_scheduler_entry_carries_the_environment_of_the_moment_it_is_sent(monkeypatch) -> None:
    entry = SchedulerEntry()
    monkeypatch.setenv("PERFMODEL_ALIGN_DUMP_DIR", "/tmp/dumps-a")
    sent = pickle.dumps(entry)  # what Process.start does, in the engine's process
    monkeypatch.setenv("PERFMODEL_ALIGN_DUMP_DIR", "/tmp/dumps-b")
    received = pickle.loads(sent)
    assert received.environ["PERFMODEL_ALIGN_DUMP_DIR"] == "/tmp/dumps-a"
    assert entry.environ is None  # the class attribute itself holds none


_RELAY_CHECK = textwrap.dedent("""
    import multiprocessing, os, signal, sys, time
    from executor.backends.local import engine_processes

    def child(q):  # what SGLang's scheduler does when it fails: SIGQUIT to its parent
        q.put((os.getppid(), os.environ.get("RANK")))
        os.kill(os.getppid(), signal.SIGQUIT)

    if __name__ == "__main__":
        got = []
        signal.signal(signal.SIGQUIT, lambda *a: got.append(1))
        os.environ["RANK"] = "0"  # as under torchrun: the forkserver starts without it
        engine_processes.prestart("LlamaForCausalLM", import_sglang=False)  # the relay needs no SGLang
        ctx = multiprocessing.get_context("forkserver")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        parent, rank = q.get(timeout=120)
        p.join(60)
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            time.sleep(0.1)
        print(parent != os.getpid(), rank, bool(got), engine_processes.start_method("LlamaForCausalLM"),
              engine_processes.start_method("MixtralForCausalLM"))
""")


@needs_stack
@pytest.mark.timeout(300)
def test_a_child_of_the_forkserver_that_signals_its_parent_reaches_the_engines_process(tmp_path) -> None:
    script = tmp_path / "relay.py"
    script.write_text(_RELAY_CHECK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=280)
    assert out.returncode == 0, out.stderr[-3000:]
    # forked from the forkserver (not the engine's process), torchrun's RANK not inherited, SIGQUIT relayed;
    # a second architecture in the same process spawns
    assert out.stdout.split() == ["True", "None", "True", "forkserver", "spawn"], out.stdout + out.stderr[-2000:]
