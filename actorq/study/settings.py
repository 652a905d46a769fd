"""The study's experiments: which runs `actorq study` makes, and the quick subset.

Each setting is one `actorq run` configuration; a study runs it once per (seed,
precision), interleaved, with the same wall-clock budget for every arm. Learner
hyperparameters that are not flags travel as ACTORQ_* variables (`env`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One experiment: an `actorq run` configuration compared across precisions."""

    name: str
    env_id: str
    algo: str
    hidden: tuple[int, ...]
    actors: int
    envs_per_actor: int
    eval_envs: int
    max_seconds: float
    variables: tuple[tuple[str, str], ...] = ()  # ACTORQ_* for every service of the run
    samples_per_insert: float | None = None  # None: actorq run's default for the algorithm
    # The return every arm (fp32 included) is timed to; None: the final return of the fp32
    # run with the same seed (the measure, which says little where fp32 ends its
    # budget before learning the task).
    target_return: float | None = None
    note: str = ""

    def run_args(self) -> list[str]:
        return [
            "--env", self.env_id, "--algo", self.algo,
            "--hidden", ",".join(map(str, self.hidden)),
            "--actors", str(self.actors), "--envs-per-actor", str(self.envs_per_actor),
            "--eval-envs", str(self.eval_envs), "--target-return", "none",
            # Settle as before --target-return none turned the automatic settle off.
            "--settle-at", "auto",
            "--max-env-steps", "100000000", "--max-seconds", f"{self.max_seconds:g}",
            *(("--samples-per-insert", f"{self.samples_per_insert:g}")
              if self.samples_per_insert is not None else ()),
        ]  # fmt: skip

    def describe(self, seconds: float | None = None) -> str:
        """One line; `seconds` overrides the per-run budget shown (--quick, --max-seconds)."""
        widths = "x".join(map(str, self.hidden))
        spi = () if self.samples_per_insert is None else (f"{self.samples_per_insert:g}",)
        target = () if self.target_return is None else (f"{self.target_return:g}",)
        extra = ", ".join([*(f"samples per insert {v}" for v in spi),
                           *(f"{k}={v}" for k, v in self.variables),
                           *(f"timed to return {v}" for v in target)])  # fmt: skip
        return (
            f"{self.algo.upper()} on {self.env_id}, {widths} MLP, {self.actors} actors x "
            f"{self.envs_per_actor} envs, {seconds or self.max_seconds:g} s per run"
            + (f", {extra}" if extra else "")
        )


def _setting(name: str, env_id: str, algo: str, hidden: tuple[int, ...], **kw) -> Setting:
    defaults = {"actors": 2, "envs_per_actor": 8, "eval_envs": 10, "max_seconds": 120.0}
    return Setting(name, env_id, algo, hidden, **{**defaults, **kw})


_LARGE = "large policy: int8 inference should pay on 2 cores (actors and learner share them)"
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        _setting(
            "cartpole-dqn-512x3", "CartPole-v1", "dqn", (512, 512, 512),
            envs_per_actor=16, max_seconds=150.0,
            variables=(("ACTORQ_PUBLISH_EVERY", "30"),), note=_LARGE,
        ),
        _setting(
            "cartpole-dqn-512x3-spi1", "CartPole-v1", "dqn", (512, 512, 512),
            envs_per_actor=16, max_seconds=240.0, samples_per_insert=1.0,
            variables=(("ACTORQ_PUBLISH_EVERY", "30"),),
            note="large policy, replay ratio 1 (each transition sampled about once, as in "
            "Ape-X): the regime where actors' share of the CPU is largest; earlier BENCHMARKS 16d",
        ),
        _setting(
            "cartpole-dqn-512x3-spi0.125", "CartPole-v1", "dqn", (512, 512, 512),
            envs_per_actor=16, max_seconds=240.0, samples_per_insert=0.125,
            variables=(("ACTORQ_PUBLISH_EVERY", "30"),),
            note="large policy, each transition sampled about once in eight: the learner "
            "waits for actors, so actor inference bounds updates/s; BENCHMARKS.md 16g",
        ),
        _setting(
            "cartpole-dqn-1024x3-spi0.125", "CartPole-v1", "dqn", (1024, 1024, 1024),
            envs_per_actor=16, max_seconds=240.0, samples_per_insert=0.125,
            variables=(("ACTORQ_PUBLISH_EVERY", "30"),),
            note="larger policy in the same regime: inference is most of an fp32 actor step, "
            "int8 1.8x fp32's env steps/s on a VNNI CPU; BENCHMARKS.md 16h",
        ),
        _setting(
            "cartpole-dqn-1024x3-spi0.125-replay2m", "CartPole-v1", "dqn", (1024, 1024, 1024),
            envs_per_actor=16, max_seconds=480.0, samples_per_insert=0.125,
            variables=(("ACTORQ_PUBLISH_EVERY", "30"), ("ACTORQ_REPLAY_CAPACITY", "2000000")),
            target_return=475.0,
            note="as above with a 2M-transition replay (the default 100k holds ~7 s of "
            "data at this rate, ~100 updates); arms are timed to CartPole's solve bar, 475 "
            "over 100 evaluator episodes; BENCHMARKS.md 16j",
        ),
        _setting(
            "cartpole-dqn-512x3-pub300", "CartPole-v1", "dqn", (512, 512, 512),
            envs_per_actor=16, max_seconds=150.0,
            variables=(("ACTORQ_PUBLISH_EVERY", "300"),),
            note="as above, publishing every 300 updates (the paper's other period)",
        ),
        _setting(
            "cartpole-dqn-64x2", "CartPole-v1", "dqn", (64, 64),
            note="the default small policy: inference is a small share of a step",
        ),
        _setting(
            "cartpole-dqn-2048x2", "CartPole-v1", "dqn", (2048, 2048),
            envs_per_actor=16, max_seconds=240.0,
            variables=(("ACTORQ_PUBLISH_EVERY", "300"),),
            note="very large policy: broadcasts of 17 MB fp32 vs 4 MB int8",
        ),
        _setting(
            "pendulum-td3", "Pendulum-v1", "td3", (256, 256),
            actors=1, envs_per_actor=4, max_seconds=240.0,
            note="continuous control, deterministic policy",
        ),
        _setting(
            "cartpole-swingup-d4pg", "dmc:cartpole-swingup", "d4pg", (256, 256),
            envs_per_actor=4, max_seconds=600.0,
            variables=(("ACTORQ_D4PG_OBS_NORM", "true"),),
            note="the paper's setting (D4PG on DM Control)",
        ),
    )
}  # fmt: skip

FULL = tuple(SETTINGS)
QUICK = ("cartpole-dqn-512x3",)
QUICK_SECONDS = 120.0
PRECISIONS = ("fp32", "fp16", "int8", "int4")
