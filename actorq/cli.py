"""The `actorq` command. `actorq run --help` lists every flag."""

from __future__ import annotations

import argparse
import os
import sys

from actorq import __version__
from actorq.config import ALGORITHMS, PRECISIONS, ConfigError, RunSettings, parse_int_tuple
from actorq.config_parse import ENV_BACKENDS

EXIT_USER_ERROR = 2
CONTINUOUS_SAMPLES_PER_INSERT = 128.0
SETTLE_AT_DEFAULT = "auto, or none with --target-return none"  # --settle-at not given


def _hidden(text: str) -> tuple[int, ...]:
    try:
        return parse_int_tuple(text, "--hidden")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _target(text: str) -> float | None:
    if text.lower() in ("none", "off"):
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from None


def _settle_at(text: str) -> float | str | None:
    if text == SETTLE_AT_DEFAULT:  # argparse passes a string default through `type`
        return text
    return "auto" if text.lower() == "auto" else _target(text)


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    d = RunSettings()
    p = sub.add_parser(
        "run",
        help="train on this machine: embedded Redis, quantizer, learner, N actors, evaluator",
        description="Run ActorQ training with every service as a separate local process.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--env",
        default=d.env,
        help="env id: gymnasium (CartPole-v1, Pendulum-v1, HalfCheetah-v5, ...), "
        "dmc:<domain>-<task> (DeepMind Control), minatar:<game> (MinAtar, e.g. "
        "minatar:breakout; CNN policy) or ale:<Game> (Atari, e.g. ale:Pong; CNN policy); "
        "discrete actions for dqn/ppo/appo/a2c, continuous for ddpg/td3/sac/d4pg",
    )
    p.add_argument(
        "--algo",
        default=d.algo,
        choices=ALGORITHMS,
        help="learning algorithm (hyperparameters: ACTORQ_<ALGO>_* variables)",
    )
    p.add_argument("--actors", type=int, default=d.actors, help="actor processes")
    p.add_argument(
        "--unroll", type=int, default=d.unroll, help="ppo/appo/a2c: steps per trajectory segment"
    )
    p.add_argument("--envs-per-actor", type=int, default=d.envs_per_actor, help="envs per actor")
    p.add_argument(
        "--precision", default=d.precision, choices=PRECISIONS, help="actor policy precision"
    )
    p.add_argument(
        "--hidden", type=_hidden, default=d.hidden, help="hidden widths, e.g. 512,512,512"
    )
    p.add_argument(
        "--max-env-steps",
        type=int,
        default=None,
        help=f"stop after this many actor env steps (default: {d.max_env_steps}, or no limit "
        "when --max-seconds is given; 0 = no limit, needs --max-seconds)",
    )
    p.add_argument(
        "--target-return",
        type=_target,
        default=d.target_return,
        help="stop when the evaluator's mean of its last 100 episodes reaches it ('none' = never)",
    )
    p.add_argument(
        "--settle-at",
        type=_settle_at,
        default=SETTLE_AT_DEFAULT,
        help="when one evaluator round (25 episodes, ACTORQ_SETTLE_EPISODES) averages this "
        "return, the learner certifies the version that scored it (100 fresh greedy episodes "
        "of its weights at the actors' precision, ACTORQ_SETTLE_CERTIFY_EPISODES, must "
        "average it too); a certified version is loaded, the replay ratio drops to 4 and the "
        "weights stop changing (learning rate x ACTORQ_SETTLE_LR_SCALE, default 0) for the "
        "rest of the run; a candidate that fails is dropped and learning goes on ('auto' = "
        "the env's reward threshold for dqn, e.g. 475 on CartPole-v1, else never; 'none' = "
        "never); not given: auto, but none with "
        "--target-return none (a throughput run)",
    )
    p.add_argument(
        "--max-seconds", type=float, default=d.max_seconds, help="wall-clock budget (0 = none)"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="random seed")
    p.add_argument(
        "--run-dir", default=d.run_dir, help="output folder (default runs/<env>-<precision>-<time>)"
    )
    p.add_argument(
        "--redis-url",
        default=d.redis_url,
        help="external Redis, e.g. redis://host:6379/0 (default: start an embedded one)",
    )
    p.add_argument(
        "--eval-envs", type=int, default=d.eval_envs, help="evaluator envs (episodes per version)"
    )
    p.add_argument(
        "--samples-per-insert",
        type=float,
        default=None,
        help="replay ratio enforced between learner and actors (default: "
        f"{d.samples_per_insert:g} for dqn, {CONTINUOUS_SAMPLES_PER_INSERT:g} for the "
        "continuous algorithms, which need about one update of 256 per 2 env steps)",
    )
    p.add_argument(
        "--replay",
        default=d.replay,
        choices=["uniform", "prioritized"],
        help="replay sampling: uniform, or prioritized on a K-ary sum tree (ACTORQ_PER_* tune it)",
    )
    p.add_argument(
        "--ingest",
        default=None,
        choices=["thread", "process"],
        help="where the learner reads replay from Redis: a thread (default) or its own "
        "process over shared memory, off the updates' GIL (ACTORQ_INGEST; BENCHMARKS 20b)",
    )
    p.add_argument(
        "--learners",
        type=int,
        default=d.learners,
        help="data-parallel learner processes (gradients all-reduced; rank 0 publishes)",
    )
    p.add_argument(
        "--qat-bits",
        type=int,
        default=d.qat_bits,
        help="quantization-aware training: fake-quantize the policy network's weights at "
        "this width (2..8, straight-through gradients) while training; 0 = off",
    )
    p.add_argument(
        "--sparsity",
        type=float,
        default=0.0,
        help="RLx2 sparse training: share of zero weights in actor and critics, in [0, 1), "
        "with topology evolution, the delayed 3-step target and the dynamic replay "
        "(docs/algorithms.md, Sparse training); 0 = dense",
    )
    p.add_argument(
        "--sparsity-actor", type=float, default=None, help="actor sparsity (default: --sparsity)"
    )
    p.add_argument(
        "--learner-device",
        default=os.environ.get("ACTORQ_DEVICE", d.learner_device),
        help="where the learner trains: auto | cpu | cuda | cuda:N (default: ACTORQ_DEVICE, "
        "else auto: cuda only where a GPU is faster for this network, docs/gpu-learner.md)",
    )
    p.add_argument(
        "--pin-learner",
        default=os.environ.get("ACTORQ_PIN_LEARNER", d.pin_learner),
        choices=["auto", "on", "off"],
        help="on: a CPU learner gets ACTORQ_TORCH_THREADS cores of its own and the other "
        "services the rest, where at least one core is left: faster where the learner sets "
        "the pace, slower where actors do (BENCHMARKS 20); auto: the same, but the other "
        "services share the learner's cores while it mostly waits for data; off: no pinning "
        "(default: ACTORQ_PIN_LEARNER, else auto)",
    )
    p.add_argument(
        "--sparsity-critic", type=float, default=None, help="critic sparsity (default: --sparsity)"
    )
    p.add_argument(
        "--env-backend",
        default=d.env_backend,
        choices=ENV_BACKENDS,
        help="who builds the actors' vector envs: gymnasium (every family) or envpool "
        "(classic control, MuJoCo, ale:; pip install 'actorq[envpool]'; not for ppo/appo/"
        "a2c); docs/actor-throughput.md says which is faster per family",
    )


def _add_ptq_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ptq",
        help="post-training quantization study of a trained checkpoint",
        description="Evaluate a trained policy (any algorithm) at several weight widths: "
        "32/16/8/4 through the real blob path, other widths simulated. Writes ptq.csv, "
        "ptq.md and ptq.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoint", help="checkpoint.pt, its folder, or a run folder")
    p.add_argument("--env", default=None, help="env id (default: the checkpoint's)")
    p.add_argument("--bits", default="32,16,8,6,4,2", help="comma-separated weight widths")
    p.add_argument("--episodes", type=int, default=100, help="evaluation episodes per width")
    p.add_argument("--out", default="", help="output folder (default: <run folder>/ptq)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actorq",
        description="Distributed off-policy RL with int8-quantized actors (ActorQ).",
    )
    parser.add_argument("--version", action="version", version=f"actorq {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_healthcheck_parser(sub)
    _add_cluster_parser(sub)
    _add_ptq_parser(sub)
    _add_study_parser(sub)
    _add_scale_parser(sub)
    sub.add_parser(  # parsed by actorq.security.redis_acl; listed here for --help
        "redis-acl",
        help="write a Redis ACL file with one least-privilege user per service",
        add_help=False,
    )
    return parser


def _add_study_parser(sub: argparse._SubParsersAction) -> None:
    from actorq.study.cli import add_arguments

    p = sub.add_parser(
        "study",
        help="fp32/fp16/int8/int4 actors end to end: speed, CPU, energy, breakdown",
        description="Runs every (setting, seed, precision) through `actorq run`, "
        "interleaved and resumable, and writes report.md, runs.csv, arms.csv and plots.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_arguments(p)


def _add_scale_parser(sub: argparse._SubParsersAction) -> None:
    from actorq.scale.cli import add_arguments

    p = sub.add_parser(
        "scale",
        help="actors x precision x replay ratio x seeds: throughput and time to target",
        description="Runs every (actors, precision, samples per insert, seed) through "
        "`actorq run`, resumable, and writes report.md, runs.csv and plots (docs/scale.md).",
    )
    add_arguments(p)


def _add_healthcheck_parser(sub: argparse._SubParsersAction) -> None:
    from actorq.rpc.healthcheck import add_arguments

    p = sub.add_parser("healthcheck", help="exit 0 if a service's grpc.health.v1 says SERVING")
    add_arguments(p)


def _add_cluster_parser(sub: argparse._SubParsersAction) -> None:
    from actorq.cluster.cli import add_arguments

    p = sub.add_parser("cluster", help="start, scale or stop a cluster of containers (Docker)")
    add_arguments(p)


def _samples_per_insert(args: argparse.Namespace) -> float:
    if args.samples_per_insert is not None:
        return args.samples_per_insert
    if args.algo != "dqn":
        return CONTINUOUS_SAMPLES_PER_INSERT
    return RunSettings().samples_per_insert


def _resolve_settle_at(args: argparse.Namespace) -> float | None:
    """--settle-at auto: the env's reward threshold for DQN on one learner, else never (it
    was measured for DQN only: earlier BENCHMARKS 12k). Not given: auto, unless --target-return
    is none, where nothing is to be solved and settling would freeze a throughput run's
    learner mid-run."""
    if args.settle_at == SETTLE_AT_DEFAULT:
        if args.target_return is None:
            return None
        args.settle_at = "auto"
    if args.settle_at != "auto":
        return args.settle_at
    if args.algo != "dqn" or args.learners != 1:
        return None
    import gymnasium

    try:
        return gymnasium.spec(args.env).reward_threshold
    except gymnasium.error.Error:
        return None  # not a registered gymnasium id (dmc:, minatar:, ...): no threshold


def _resolve_max_env_steps(args: argparse.Namespace) -> int:
    """--max-env-steps when given; else no limit (0) with --max-seconds, else the default."""
    if args.max_env_steps is not None:
        return args.max_env_steps
    return 0 if args.max_seconds > 0 else RunSettings().max_env_steps


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def _run(args: argparse.Namespace) -> int:
    settings = RunSettings(
        env=args.env,
        algo=args.algo,
        actors=args.actors,
        envs_per_actor=args.envs_per_actor,
        precision=args.precision,
        hidden=args.hidden,
        max_env_steps=_resolve_max_env_steps(args),
        target_return=args.target_return,
        settle_at=_resolve_settle_at(args),
        max_seconds=args.max_seconds,
        seed=args.seed,
        run_dir=args.run_dir,
        redis_url=args.redis_url,
        eval_envs=args.eval_envs,
        samples_per_insert=_samples_per_insert(args),
        learners=args.learners,
        replay=args.replay,
        ingest=args.ingest or "",
        qat_bits=args.qat_bits,
        unroll=args.unroll,
        sparsity_actor=_or(args.sparsity_actor, args.sparsity),
        sparsity_critic=_or(args.sparsity_critic, args.sparsity),
        learner_device=args.learner_device,
        env_backend=args.env_backend,
        pin_learner=args.pin_learner,
    )
    from actorq.launch.zygote import Zygote

    # Start the services' pre-imported parent first: it imports torch & co. while this
    # process does the same and starts Redis, so services fork ready-made.
    zygote = Zygote.start()
    try:
        from actorq.launch.run import run  # imports torch etc. only when needed

        return run(settings, zygote)
    finally:
        if zygote is not None:
            zygote.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["redis-acl"]:
        from actorq.security.redis_acl import main as redis_acl_main

        return redis_acl_main(argv[1:])
    args = build_parser().parse_args(argv)
    from actorq.service import USER_ERRORS

    try:
        if args.command == "run":
            return _run(args)
        if args.command == "healthcheck":
            from actorq.rpc.healthcheck import run as healthcheck

            return healthcheck(args)
        if args.command == "cluster":
            from actorq.cluster.cli import run as cluster

            return cluster(args)
        if args.command == "study":
            from actorq.study.cli import run as study

            return study(args)
        if args.command == "scale":
            from actorq.scale.cli import run as scale

            return scale(args)
        if args.command == "ptq":
            from actorq.ptq import main as ptq_main

            return ptq_main(args.checkpoint, args.env, args.bits, args.episodes, args.out)
    except USER_ERRORS as exc:
        print(f"actorq: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
