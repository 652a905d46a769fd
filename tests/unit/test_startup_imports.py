"""Start-up stays fast: what the launcher and a learner's construction must not import.

Measured (BENCHMARKS.md 12e): the launcher importing torch through actorq.service, and
torch.optim's first add_param_group importing torch._dynamo in the learner, put 1.6 s
between `actorq run` and the first env step. Each check runs a fresh interpreter.
"""

from __future__ import annotations

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
