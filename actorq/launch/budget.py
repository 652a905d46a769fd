"""What ends an `actorq run`: said in one line when it starts, so a throughput run that
would stop at an env-step budget (or a learning run with no budget) is visible at once."""

from __future__ import annotations

from actorq.config import RunSettings


def what_ends(settings: RunSettings) -> str:
    """One line naming every condition that stops the run, in the order they are checked."""
    ends = []
    if settings.target_return is not None:
        ends.append(f"the evaluator's 100-episode mean return reaches {settings.target_return:g}")
    if settings.max_env_steps:
        ends.append(f"the actors took {settings.max_env_steps:,} env steps")
    if settings.max_seconds:
        ends.append(f"{settings.max_seconds:g} s of wall clock pass")
    conditions = "; or ".join(ends) if ends else "nothing but Ctrl-C"
    limits = "" if settings.max_env_steps else " (no env-step limit)"
    return f"the run ends when {conditions}{limits}; Ctrl-C stops it early"
