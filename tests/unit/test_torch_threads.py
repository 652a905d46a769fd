"""A service's loop thread runs torch ops on the thread count its main() chose.

`torch.set_num_threads` binds only the calling thread; a worker thread that does not set
it again runs each op on an OpenMP team of one thread per core (and spins them against
the other services). This counts the process's OS threads while a service loop thread
runs a forward pass: with the count inherited, the forward adds no OpenMP workers. It
runs in a fresh interpreter so no other test's torch settings leak in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import os, threading, torch
    from actorq.service import ServiceRuntime, run_loop

    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(5, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    x = torch.randn(4, 5)
    with torch.inference_mode():
        net(x)  # main thread's team is set up before counting
    seen = {}

    def forward():
        before = len(os.listdir("/proc/self/task"))
        with torch.inference_mode():
            for _ in range(50):
                net(x)
        seen["added"] = len(os.listdir("/proc/self/task")) - before
        seen["threads"] = torch.get_num_threads()

    runtime = ServiceRuntime("probe")
    worker = threading.Thread(target=run_loop, args=(forward, runtime, "done"))
    worker.start()
    worker.join()
    print(seen["added"], seen["threads"], runtime.stop_reason)
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_service_loop_thread_runs_ops_on_one_thread() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    added, threads, reason = done.stdout.split()
    assert int(threads) == 1
    assert int(added) == 0, f"the loop thread's forward started {added} OpenMP worker(s)"
    assert reason == "done"


_LATE_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading
    from actorq.service import ServiceRuntime, run_loop
    from actorq.torch_threads import inherit_torch_threads, set_torch_threads

    set_torch_threads(1)  # an actor's main(): torch not loaded, and not loaded for this
    seen = {"torch_at_start": "torch" in sys.modules}

    def loop():
        seen["torch_in_loop"] = "torch" in sys.modules  # run_loop did not import it
        inherit_torch_threads(load=True)  # a pixel policy's forward: now torch loads
        import torch
        net = torch.nn.Sequential(torch.nn.Linear(5, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
        x = torch.randn(4, 5)
        with torch.inference_mode():
            net(x)
            before = len(os.listdir("/proc/self/task"))
            for _ in range(50):
                net(x)
        seen["added"] = len(os.listdir("/proc/self/task")) - before
        seen["threads"] = torch.get_num_threads()

    worker = threading.Thread(target=run_loop, args=(loop, ServiceRuntime("probe"), "done"))
    worker.start()
    worker.join()
    print(seen["torch_at_start"], seen["torch_in_loop"], seen["added"], seen["threads"])
    """
)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_a_count_set_before_torch_loads_applies_when_a_thread_loads_it() -> None:
    """An actor sets one thread without importing torch; the loop thread that later needs
    torch (a pixel policy) loads it and runs on that one thread, no OpenMP workers added."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", _LATE_SCRIPT], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    torch_at_start, torch_in_loop, added, threads = done.stdout.split()
    assert (torch_at_start, torch_in_loop) == ("False", "False")
    assert int(threads) == 1
    assert int(added) == 0, f"the loop thread's forward started {added} OpenMP worker(s)"
