"""Arguments of `actorq scale` and its entry point."""

from __future__ import annotations

import argparse
from pathlib import Path

from actorq.scale.grid import (
    DEFAULTS,
    LAUNCHERS,
    SMOKE,
    SMOKE_RUN_ARGS,
    GridConfig,
    check_budget,
    check_launcher,
    check_run_args,
    parse_actors,
    parse_precisions,
    parse_ratios,
    parse_seeds,
    resolve_target,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    p.add_argument("--out", required=True, help="report folder (runs/ goes inside); resumable")
    p.add_argument("--actors", default=None, help=f"actor counts (default {d['actors']})")
    p.add_argument(
        "--precisions", default=None, help=f"actor precisions (default {d['precisions']})"
    )
    p.add_argument(
        "--samples-per-insert",
        default=None,
        help=f"replay ratios, samples per inserted transition (default {d['samples_per_insert']})",
    )
    p.add_argument("--seeds", default=None, help=f"seeds (default {d['seeds']})")
    p.add_argument("--env", default=None, help=f"env id (default {d['env']})")
    p.add_argument("--algo", default=None, help=f"algorithm (default {d['algo']})")
    p.add_argument(
        "--target-return",
        type=float,
        default=None,
        help="the evaluator's 100-episode mean return runs are timed to (default: the env's "
        "reward threshold, 475 on CartPole-v1; required where the env has none, e.g. MinAtar)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help=f"wall-clock budget per run (default {d['max_seconds']:g}; 0 = none, needs "
        "--max-env-steps)",
    )
    p.add_argument("--max-env-steps", type=int, default=None, help="env-step budget per run")
    p.add_argument(
        "--stop-at-target",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end each run once it reaches the target (--no-stop-at-target: run the budget)",
    )
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default="processes",
        help="processes: each cell one `actorq run`; compose: each cell one `docker compose up "
        "--scale actor=N` of the local-image stack (a Docker engine and `make image`)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"a few minutes: actors {SMOKE['actors']} x {SMOKE['precisions']} on "
        f"{SMOKE['env']}, seed {SMOKE['seeds']}, {SMOKE['max_seconds']:g} s per run, "
        f"{' '.join(SMOKE_RUN_ARGS)} (flags given still win)",
    )
    p.add_argument(
        "run_args",
        nargs="*",
        metavar="-- RUN_FLAGS",
        help="after `--`: flags for every `actorq run`, e.g. -- --hidden 256,256",
    )


def build_config(args: argparse.Namespace) -> GridConfig:
    """The validated grid; a bad value is a ConfigError (exit 2) naming it."""
    base = SMOKE if args.smoke else DEFAULTS

    def pick(name: str):
        value = getattr(args, name)
        return base[name] if value is None else value

    run_args = check_run_args(list(args.run_args))
    # --smoke's run flags go first, so flags after `--` still win; compose takes none.
    smoke_args = SMOKE_RUN_ARGS if args.smoke and args.launcher == "processes" else ()
    config = GridConfig(
        actors=parse_actors(pick("actors")),
        precisions=parse_precisions(pick("precisions")),
        samples_per_insert=parse_ratios(pick("samples_per_insert")),
        seeds=parse_seeds(pick("seeds")),
        env=pick("env"),
        algo=pick("algo"),
        target_return=resolve_target(pick("env"), args.target_return),
        max_seconds=float(pick("max_seconds")),
        max_env_steps=args.max_env_steps,
        stop_at_target=args.stop_at_target,
        run_args=(*smoke_args, *run_args),
        launcher=args.launcher,
    )
    return check_launcher(check_budget(config))


def run(args: argparse.Namespace) -> int:
    from actorq.scale.report import write_report
    from actorq.scale.runner import close_session, open_state, run_grid

    config = build_config(args)
    if config.launcher == "compose":
        from actorq.scale.compose_runner import find_tools

        find_tools()  # no engine, no Compose or no images: exit 2 before anything is written
    out = Path(args.out)
    state = open_state(out, config, config.command(out))
    runs = config.plan()
    print(
        f"actorq scale: {len(runs)} runs of {config.algo} on {config.env} ({config.launcher}), "
        f"target {config.target_return:g}, into {out}",
        flush=True,
    )
    code, tally = run_grid(out, config, state)
    close_session(out, state, tally)
    if tally.ran == 0 and code == 0:
        print(f"nothing to run: all {tally.done_already} runs done already", flush=True)
    else:
        print(
            f"ran {tally.ran} ({tally.failed} failed), {tally.done_already} done already",
            flush=True,
        )
    print(f"report: {write_report(out, config, state)}", flush=True)
    return code
