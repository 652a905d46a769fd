"""Live progress for `actorq run`: a rich panel on a terminal, plain lines otherwise."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from actorq.config import RunSettings
from actorq.launch.monitor import ProgressSample
from actorq.launch.outputs import Summary


def _fmt(value: float, digits: int = 1) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.{digits}f}"
    )


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class ProgressView:
    """Shows env steps, returns, version, updates/s and bandwidth saved as the run goes."""

    def __init__(self, settings: RunSettings, run_dir: Path, plain_every: float = 5.0) -> None:
        self.settings = settings
        self.console = Console(stderr=False)
        self.interactive = sys.stdout.isatty()
        self.plain_every = plain_every
        self._last_plain = 0.0
        self._live: Live | None = None
        self.console.print(
            f"[bold]actorq run[/bold]: {settings.env}, {settings.algo}, {settings.actors} actors x "
            f"{settings.envs_per_actor} envs, {settings.precision} actors, hidden "
            f"{','.join(map(str, settings.hidden))}; run folder {run_dir}"
        )

    def message(self, text: str) -> None:
        if self._live is None:
            self.console.print(text)

    def update(self, sample: ProgressSample) -> None:
        if self.interactive:
            if self._live is None:
                self._live = Live(self._table(sample), console=self.console, refresh_per_second=4)
                self._live.start()
            else:
                self._live.update(self._table(sample))
        elif time.monotonic() - self._last_plain >= self.plain_every:
            self._last_plain = time.monotonic()
            print(self._line(sample), flush=True)

    def _line(self, s: ProgressSample) -> str:
        return (
            f"[{s.wall_seconds:7.1f}s] env steps {s.env_steps:>9,} | eval return "
            f"{_fmt(s.eval_mean_return):>6} ({s.eval_episodes} ep) | train return "
            f"{_fmt(s.train_mean_return):>6} | version {s.policy_version:>5} | updates "
            f"{s.learner_updates:>7,} ({_fmt(s.updates_per_second, 0)}/s) | saved "
            f"{_bytes(s.bytes_saved_total)}"
        )

    def _table(self, s: ProgressSample) -> Table:
        table = Table(show_header=False, box=None, padding=(0, 2))
        table.add_row("wall time", f"{s.wall_seconds:.1f} s", "env steps", f"{s.env_steps:,}")
        target = self.settings.target_return
        table.add_row(
            "eval return (last 100)",
            f"{_fmt(s.eval_mean_return)}" + (f" / {target:g}" if target is not None else ""),
            "train return (last 100)",
            _fmt(s.train_mean_return),
        )
        table.add_row(
            "policy version", str(s.policy_version), "learner updates", f"{s.learner_updates:,}"
        )
        table.add_row("updates/s", _fmt(s.updates_per_second, 0), "loss", _fmt(s.loss, 4))
        table.add_row(
            "blob (one version)",
            _bytes(s.blob_bytes),
            "broadcast sent",
            _bytes(s.broadcast_bytes_total),
        )
        table.add_row(
            "bandwidth saved", _bytes(s.bytes_saved_total), "replay size", f"{s.replay_size:,}"
        )
        return table

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def final(self, summary: Summary, run_dir: Path) -> None:
        if summary.target_return is None:  # nothing to solve: a throughput or timed run
            verdict = "finished"
        else:
            verdict = "solved" if summary.solved else "not solved"
        self.console.print(
            f"[bold]{verdict}[/bold] ({summary.stop_reason}): eval return "
            f"{_fmt(summary.final_mean_return)} after {summary.env_steps:,} env steps, "
            f"{summary.learner_updates:,} updates, {summary.wall_seconds:.1f}s; "
            f"{summary.policy_versions} versions, {_bytes(summary.bytes_saved_total)} saved by "
            f"{summary.precision} broadcasts"
        )
        if summary.learner_device is not None:
            self.console.print(
                f"learner on {summary.learner_device}, update path "
                f"{summary.learner_update_path}, {summary.learner_dtype}"
            )
        lost = summary.final_records.get("transitions_not_ingested") or 0
        if lost > 0 and not any(name.startswith("learner") for name in summary.restarts):
            self.console.print(
                f"[yellow]{lost:,} of {summary.transitions_inserted:,} transitions Redis "
                "acknowledged were never read by the learner[/yellow] (trimmed from the "
                "replay stream before it got to them: ingest fell behind the actors)"
            )
        self.console.print(
            f"results in {run_dir}/ (summary.json, metrics.jsonl, episodes.csv, plots)"
        )
