"""What `make image` builds (the `local_images` fixture): actorq itself on top of its
dependencies in both roles' images, and the slim image's stand-ins for the packages it
leaves out raising a clear ImportError."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(600)]


def _in(docker: str, image: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run([docker, "run", "--rm", image, *command], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_both_images_run_actorq_with_its_entry_point(local_images: str) -> None:
    for image in ("actorq:latest", "actorq:core"):
        done = _in(local_images, image, "actorq", "--help")
        assert done.returncode == 0 and "usage: actorq" in done.stdout, (image, done.stderr)
    roles = "import services.actor.main, services.quantizer.main, torch.ao.quantization"
    done = _in(local_images, "actorq:core", "python", "-c", roles)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", ["sympy", "mpmath", "networkx"])
def test_the_slim_image_names_the_image_for_what_it_leaves_out(
    local_images: str, module: str
) -> None:
    done = _in(local_images, "actorq:core", "python", "-c", f"import {module}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: {module} is left out of the slim actorq:core image (SLIM=1); "
        "this code path needs it: run this role from actorq:latest"
    ), done.stderr
