"""Environment construction: one factory (`factory.py`) over gymnasium, the DeepMind
Control Suite (`dmc.py`) and the pixel families MinAtar and ALE (`pixel.py`).

`from actorq.envs import make_env` and friends keep working: the factory's public
names are re-exported here.
"""

from actorq.envs.factory import (
    DMC_PREFIX,
    FAMILIES,
    EnvError,
    EnvInfo,
    check_backend,
    describe_env,
    is_pixel_space,
    make_env,
    make_vector_env,
    next_obs_for_replay,
)

__all__ = [
    "DMC_PREFIX",
    "FAMILIES",
    "EnvError",
    "EnvInfo",
    "check_backend",
    "describe_env",
    "is_pixel_space",
    "make_env",
    "make_vector_env",
    "next_obs_for_replay",
]
