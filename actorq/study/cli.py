"""Arguments of `actorq study` and its entry point."""

from __future__ import annotations

import argparse
from pathlib import Path

from actorq.study.settings import FULL, PRECISIONS, QUICK, QUICK_SECONDS, SETTINGS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="study", help="report and run folders go here")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"a few minutes: {', '.join(QUICK)}, one seed, {QUICK_SECONDS:g} s per run",
    )
    p.add_argument(
        "--settings",
        default="",
        help=f"comma-separated, default all (quick: {', '.join(QUICK)}); any of "
        + ", ".join(SETTINGS),
    )
    p.add_argument("--precisions", default=",".join(PRECISIONS), help="must include fp32")
    p.add_argument("--seeds", default="", help="default 0,1,2 (quick: 0)")
    p.add_argument("--max-seconds", type=float, default=None, help="override each run's budget")
    p.add_argument(
        "--report-only", action="store_true", help="only rewrite the report from the run folders"
    )


def run(args: argparse.Namespace) -> int:
    from actorq.study.runner import parse_selection, run_study

    seeds = args.seeds or ("0" if args.quick else "0,1,2")
    settings, precisions, seed_list = parse_selection(
        args.settings, args.precisions, seeds, args.quick
    )
    seconds = args.max_seconds
    if seconds is None and args.quick:
        seconds = QUICK_SECONDS
    if seconds is not None and seconds <= 0:
        from actorq.config import ConfigError

        raise ConfigError(f"--max-seconds {seconds:g}: expected > 0")
    from actorq.study.report import write_report

    out = Path(args.out)
    code, runs, state = run_study(out, settings, precisions, seed_list, seconds, args.report_only)
    print(f"report: {write_report(out, runs, state)}")
    return code


__all__ = ["FULL", "add_arguments", "run"]
