"""Optional dependencies: a missing extra fails with the pip command that installs it.

A package is made absent the way Python itself knows it: `sys.modules[name] = None` makes
`import name` raise ModuleNotFoundError, as on an install without that extra."""

from __future__ import annotations

import sys
import tomllib

import pytest

from actorq.envs import EnvError, make_env
from actorq.extras import EXTRAS, MissingExtraError, require
from actorq.extras import __file__ as extras_file


@pytest.fixture
def absent(monkeypatch: pytest.MonkeyPatch):
    def hide(*names: str) -> None:
        for name in list(sys.modules):
            if name.split(".")[0] in names:
                monkeypatch.delitem(sys.modules, name)
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def test_require_names_the_extra(absent) -> None:
    absent("numba")
    with pytest.raises(MissingExtraError, match=r"pip install 'actorq\[prioritized\]'"):
        require("numba", "prioritized", "prioritized replay")
    assert require("minatar", "atari", "x").__name__ == "minatar"
    with pytest.raises(ValueError, match="expected one of"):
        require("numba", "plots", "x")  # numba is not the plots extra's


def test_mujoco_env_without_the_extra_says_which_extra(absent) -> None:
    absent("mujoco", "dm_control")
    with pytest.raises(EnvError, match=r"actorq\[mujoco\].*actorq:mujoco"):
        make_env("HalfCheetah-v5")
    with pytest.raises(EnvError, match=r"dmc:cartpole-swingup: .*actorq\[mujoco\]"):
        make_env("dmc:cartpole-swingup")


def test_pixel_envs_and_codec_without_the_extra(absent) -> None:
    from actorq.obs_codec import compress

    absent("minatar", "ale_py")
    with pytest.raises(ImportError, match=r"actorq\[atari\]"):
        make_env("minatar:breakout")
    # zstandard is core (policy deltas): pixel compression needs no extra
    assert len(compress(b"\0" * 64, "zstd")) < 64
    assert compress(b"abc", "none") == b"abc"


def test_plots_and_prioritized_replay_without_their_extras(absent, tmp_path) -> None:
    from actorq.config import LearnerSettings
    from actorq.learner.sampling import make_sampler
    from actorq.study.report import _pyplot

    absent("matplotlib", "numba")
    with pytest.raises(ImportError, match=r"actorq\[plots\]"):
        _pyplot()
    settings = LearnerSettings(replay="prioritized")
    with pytest.raises(ImportError, match=r"actorq\[prioritized\]"):
        make_sampler(settings)


def test_classic_control_needs_no_extra(absent) -> None:
    absent(*(m for mods in EXTRAS.values() for m in mods))
    env = make_env("CartPole-v1")
    env.reset(seed=0)
    env.close()


def test_extras_match_pyproject_and_dev_installs_them_all() -> None:
    from pathlib import Path

    root = Path(extras_file).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    assert set(EXTRAS) <= set(optional)
    dev = {r.split("==")[0].split(">=")[0] for r in optional["dev"]}
    # envpool is installed by scripts/setup.sh with --no-deps (pyproject.toml says why), at
    # the pin its extra names, so CI and `make setup` still install every extra
    setup_sh = (root / "scripts" / "setup.sh").read_text()
    assert optional["envpool"][0] == "envpool==1.2.5" and "envpool==1.2.5" in setup_sh
    for extra in set(EXTRAS) - {"envpool"}:
        names = {r.split("==")[0].split(">=")[0] for r in optional[extra]}
        assert names <= dev, f"extra {extra}: {names - dev} missing from dev"
    base = " ".join(project["dependencies"])
    for modules in EXTRAS.values():
        assert not any(m.replace("_", "-") in base for m in modules)
