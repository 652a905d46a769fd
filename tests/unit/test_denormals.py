"""Subnormal floats in the learner (actorq.denormals): flushed on the thread that asks and
on the threads it starts later, kept when asked, and what that does to an update's state.

Each case runs in a fresh interpreter: the flags are per thread and would otherwise stay
set in the test process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from actorq.learner.update_path import LearnerInfo


def _python(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("on", [True, False])
def test_flush_applies_to_this_thread_and_to_threads_started_after(on: bool) -> None:
    got = _python(f"""
        import json, threading
        import numpy as np
        from actorq.denormals import denormals_flushed, flush_denormals
        before = denormals_flushed()
        now = flush_denormals({on})
        seen = {{}}
        def probe():
            seen["thread"] = denormals_flushed()
            seen["half_tiny"] = float(np.float32(np.finfo(np.float32).tiny) * np.float32(0.5))
        t = threading.Thread(target=probe); t.start(); t.join()
        print(json.dumps({{"before": before, "now": now, **seen}}))
    """)
    assert got["before"] is False  # a fresh interpreter keeps them (IEEE default)
    assert got["now"] is on and got["thread"] is on
    assert (got["half_tiny"] == 0.0) is on


# DQN 64x64 on the numpy-flat path: 40 updates on full observations, then observations
# whose last feature is 0, so that feature's first-layer weights get zero gradients and
# Adam's first moment of them decays by 0.9 an update: from ~1e-4 it is subnormal (below
# 1.2e-38) from ~770 updates on until it rounds to 0 at ~920.
_DEAD_INPUT_RUN = """
    import json, sys
    import numpy as np, torch
    from actorq.algos import load_algorithm_config, make_algorithm
    from actorq.denormals import flush_denormals, subnormal_mask
    from actorq.learner.update_path import setup_learner
    from actorq.testing.batches import random_update_batches
    torch.set_num_threads(1)
    flush_denormals({on})
    cfg = load_algorithm_config("dqn", {{}})
    algo = make_algorithm("dqn", 4, 2, (64, 64), cfg, device="cpu", seed=0)
    path = setup_learner(algo, "cpu", "numpy-flat").update_path
    batches = random_update_batches("dqn", 4, 2, cfg.batch_size, seed=0)
    for b in batches * 5:
        algo.update(b)
    dead = [dict(b, obs=b["obs"] * np.float32([1, 1, 1, 0])) for b in batches]
    most = 0
    for i in range(1000):
        algo.update(dead[i % len(dead)])
        if i >= 600 and i % 20 == 0:
            m = torch.cat([s["exp_avg"].flatten() for s in algo.optimizer.state.values()])
            m = m.numpy()
            most = max(most, int(subnormal_mask(m).sum()))
    print(json.dumps({{"path": path, "most_subnormal": most}}))
"""


def test_adam_moments_of_a_dead_input_turn_subnormal_unless_flushed() -> None:
    kept = _python(_DEAD_INPUT_RUN.format(on=False))
    flushed = _python(_DEAD_INPUT_RUN.format(on=True))
    assert kept["path"] == flushed["path"] == "numpy-flat"
    assert kept["most_subnormal"] >= 32  # most of the 64 weights from the dead input
    assert flushed["most_subnormal"] == 0


def test_learner_info_names_what_it_did_with_subnormals() -> None:
    info = LearnerInfo("cpu", "numpy-flat", "float32", denormals="flushed")
    assert info.line() == "device cpu, update path numpy-flat, dtype float32, denormals flushed"
    assert "denormals" not in LearnerInfo("cpu", "numpy-flat", "float32").line()
