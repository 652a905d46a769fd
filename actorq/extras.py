"""Optional dependencies, grouped as pyproject extras, imported only where used.

The base install (and the `actorq:core` image) runs classic-control envs end to end;
MuJoCo/DMC, pixel envs, plots, prioritized replay and the Docker launcher each need an
extra. `require` imports one of them and, when it is missing, raises an ImportError that
names the extra to install instead of the bare module name.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# extra -> the top-level modules it brings (pyproject.toml [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "mujoco": ("mujoco", "dm_control", "imageio"),
    "atari": ("ale_py", "minatar"),
    "plots": ("matplotlib",),
    "prioritized": ("numba",),
    "cluster": ("docker",),
    "envpool": ("envpool",),
}
# The image `make image` builds with each extra (scripts/build_images.sh).
IMAGES = {"mujoco": "actorq:mujoco", "atari": "actorq:atari"}
# Extras no image carries (envpool: ~530 MB of wheels and assets, docs/actor-throughput.md).
NOT_IN_IMAGES = ("envpool",)


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra."""


def missing_message(module: str, extra: str, what: str) -> str:
    message = (
        f"{what} needs the '{module}' package, which is not installed: "
        f"pip install 'actorq[{extra}]'"
    )
    if extra in NOT_IN_IMAGES:
        return message + " (no actorq image includes it)"
    return message + f" (containers: use the {IMAGES.get(extra, 'actorq:latest')} image)"


def require(module: str, extra: str, what: str) -> ModuleType:
    """`import module`, or MissingExtraError naming `extra` when its package is absent."""
    if module.split(".")[0] not in EXTRAS.get(extra, ()):
        raise ValueError(f"extra {extra!r}: expected one of {sorted(EXTRAS)} owning {module!r}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        if exc.name is None or exc.name.split(".")[0] != top:
            raise  # something inside the package is broken: not a missing extra
        raise MissingExtraError(missing_message(top, extra, what)) from None
