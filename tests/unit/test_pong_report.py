"""bench/pong.py's report: the ActorQ speed-up line from both arms' records, and each
arm's result line (reached, not reached, failed)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import pong

MACHINE = {"cpu": "Xeon (avx2), 16 cores", "cores": 16, "gpu": "NVIDIA H200, 143771 MiB"}


def _record(precision: str, seconds: float | None, **extra: object) -> dict:
    return {
        "date": "2026-12-02", "precision": precision, "algo": "dqn", "target": 18.0,
        "minutes": 9.0, "command": "python -m actorq run --env ale:Pong", "exit_code": 0,
        "wall_seconds": 400.0, "machine": MACHINE, "env_backend": "envpool", "failure": "",
        "seconds_to_target": seconds, "env_steps_to_target": None if seconds is None else 1000,
        "best_return": 18.5 if seconds else 3.2, "eval_episodes": 240, "env_steps": 2_000_000,
        "env_steps_per_s": 5000.0, "updates_per_s": 900.0, "stop_reason": "target reached",
        **extra,
    }  # fmt: skip


def test_the_speedup_is_fp32_seconds_over_int8_seconds() -> None:
    line = pong.speedup({"int8": _record("int8", 200.0), "fp32": _record("fp32", 300.0)})
    assert line.startswith("speed-up: int8 actors reached 18 1.50x sooner")
    assert "200 s against fp32's 300 s" in line


@pytest.mark.parametrize(
    ("records", "says"),
    [
        ({"int8": _record("int8", 200.0)}, "not measured (no fp32 arm in this folder)"),
        ({"fp32": _record("fp32", 200.0)}, "not measured (no int8 arm in this folder)"),
        (
            {"int8": _record("int8", None), "fp32": _record("fp32", 300.0)},
            "none (int8 did not reach 18)",
        ),
        (
            {
                "int8": _record("int8", 200.0),
                "fp32": _record("fp32", 300.0, machine={**MACHINE, "cores": 2}),
            },
            "not comparable (the arms ran on different machines)",
        ),
    ],
)  # fmt: skip
def test_no_speedup_is_claimed_without_two_arms_that_reached_on_one_machine(
    records: dict, says: str
) -> None:
    assert pong.speedup(records) == f"speed-up: {says}"


def test_each_arm_says_what_it_reached() -> None:
    reached = pong.markdown(_record("int8", 212.4), {"int8": _record("int8", 212.4)})
    assert "**reached 18 at 212 s** of the run (1,000 env steps)" in reached
    assert "GPU: NVIDIA H200" in reached and "env steps/s 5,000" in reached
    missed = pong.markdown(_record("fp32", None), {})
    assert "**not reached in 400 s**: best 100-episode mean 3.2" in missed
    failed = pong.markdown(_record("int8", None, failure="actorq run exited 2: bad flag"), {})
    assert "**failed**: actorq run exited 2: bad flag" in failed
    short = pong.markdown(_record("int8", None, eval_episodes=7, best_return=-20.4), {})
    assert "**not reached in 400 s**: mean -20.4 over its 7 evaluator episodes" in short


def test_bad_budgets_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        pong.parse(["--minutes", "0"])
    assert exit_info.value.code == 2
    assert "--minutes, --actors and --envs-per-actor must be positive" in capsys.readouterr().err


def test_the_run_is_logged_and_stopped_at_its_limit_even_when_silent(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    said = [sys.executable, "-c", "print('step 1', flush=True); raise SystemExit(3)"]
    assert pong.run_logged(said, log, timeout=30) == 3
    assert log.read_text() == "step 1\n"
    started = time.monotonic()
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    assert pong.run_logged(silent, log, timeout=1) == 124
    assert time.monotonic() - started < 20


def test_dqn_gets_atari_settings_unless_the_environment_sets_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACTORQ_DQN_N_STEP", raising=False)
    monkeypatch.setenv("ACTORQ_DQN_LR", "3e-4")
    settings = pong.run_env("dqn")
    assert settings["ACTORQ_DQN_LR"] == "3e-4"  # the user's value wins
    assert settings["ACTORQ_DQN_N_STEP"] == pong.DQN_ATARI["ACTORQ_DQN_N_STEP"]
    assert pong.run_env("appo") == {}
