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
