"""Start-up stays fast: what the launcher and a learner's construction must not import.

Measured (BENCHMARKS.md 12e): the launcher importing torch through actorq.service, and
torch.optim's first add_param_group importing torch._dynamo in the learner, put 1.6 s
between `actorq run` and the first env step. Each check runs a fresh interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    return set(out.stdout.split())


def test_service_helpers_used_by_the_launcher_do_not_import_torch() -> None:
    assert "torch" not in _modules_after("import actorq.service, actorq.cli")


def test_fast_adam_construction_does_not_import_dynamo() -> None:
    loaded = _modules_after(
        "import torch\nfrom actorq.algos.optim import FastAdam\n"
        "FastAdam(torch.nn.Linear(3, 2).parameters(), lr=1e-3)"
    )
    assert "torch" in loaded  # the probe did run
    assert "torch._dynamo" not in loaded


def test_fast_adam_first_step_does_not_import_dynamo() -> None:
    # Adam.step's wrapper imports torch._dynamo on its first call: 2-3 s of the learner's
    # start-up under load, where `auto` times a torch-eager update (device_probe).
    loaded = _modules_after(
        "import torch\nfrom actorq.algos.optim import FastAdam\n"
        "p = torch.nn.Parameter(torch.ones(3)); opt = FastAdam([p], lr=0.1)\n"
        "p.grad = torch.ones(3); opt.step(); opt.step()\n"
        "assert torch.allclose(p.detach(), torch.full((3,), 0.8))"
    )
    assert "torch._dynamo" not in loaded


def test_learner_updates_and_state_dicts_do_not_import_dynamo() -> None:
    # Optimizer.zero_grad / state_dict / load_state_dict sit under _disable_dynamo too:
    # `auto` times the eager path's updates and the learner reads its dtype from its state
    # dict before its first policy (1.5 s of start-up on 2 cores); the first checkpoint
    # would have stalled the training thread as long.
    loaded = _modules_after(
        "from actorq.algos import load_algorithm_config, make_algorithm\n"
        "from actorq.learner.update_path import learner_dtype\n"
        "from actorq.testing.batches import random_update_batches\n"
        "for algo, obs, out in (('dqn', 4, 2), ('td3', 3, 1), ('sac', 3, 1), ('d4pg', 3, 1)):\n"
        "    learner = make_algorithm(algo, obs, out, (8, 8), load_algorithm_config(algo, {}))\n"
        "    for batch in random_update_batches(algo, obs, out, 16, n=2):\n"
        "        learner.update(batch)\n"
        "    assert learner_dtype(learner) == 'float32'\n"
        "    learner.load_state_dict(learner.state_dict())"
    )
    assert "torch" in loaded
    assert "torch._dynamo" not in loaded


def test_actor_preload_loads_the_kernels_without_threads_or_a_leftover_setting() -> None:
    # The zygote imports actorq.actor.preload before forking every service: it must start
    # no thread (fork safety) and leave the zygote's environment as it found it.
    probe = (
        "import os, threading, numpy, torch\n"
        "before = threading.active_count()\n"
        "import actorq.actor.preload\n"
        "from actorq.quant.fused_mlp import mlp_forward\n"
        "print(before, threading.active_count(), len(mlp_forward.signatures),\n"
        "      os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120, env=env).stdout.split()  # fmt: skip
    assert out[0] == out[1]  # no thread started
    assert int(out[2]) >= 1  # the forward kernel is loaded (compiled or from the cache)
    assert out[3] == "unset"


def test_a_forked_service_starts_with_the_actor_kernels_loaded(monkeypatch, tmp_path) -> None:
    from actorq.launch.zygote import PRELOAD, Zygote

    monkeypatch.setenv("ACTORQ_LAUNCH_MODE", "fork")
    zygote = Zygote.start(("numpy", "torch", PRELOAD[-1]))  # PRELOAD's last: the kernels
    assert zygote is not None and PRELOAD[-1] == "actorq.actor.preload"
    try:
        log = tmp_path / "child.log"
        child = zygote.spawn("actorq.testing.zygote_child", dict(os.environ), str(log), 0)
        assert child.wait(timeout=60) == 0
    finally:
        zygote.close()
    assert "forward kernel loaded True" in log.read_text()
