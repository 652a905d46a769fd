"""Bad input at the command line and at service start: one clear line, exit code 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from actorq.redis_server import find_free_port


def _run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--env", "CartPol-v1"], "CartPol-v1"),
        (["--env", "Pendulum-v1"], "Discrete"),
        (["--hidden", "64,x"], "--hidden"),
        (["--precision", "int3"], "int3"),
        (["--learner-device", "gpu"], "--learner-device: expected one of auto, cpu, cuda"),
        (["--actors", "0"], "--actors"),
        (["--max-env-steps", "-5"], "--max-env-steps"),
        (["--algo", "td3", "--env", "Pendulum-v1", "--sparsity", "1.0"], "--sparsity"),
        (["--sparsity", "0.9"], "--algo dqn"),  # DQN has no sparse training
        (["--algo", "td3", "--env", "minatar:breakout"], "td3 has no CNN policy"),
        (["--env", "minatar:breakout", "--qat-bits", "4"], "--qat-bits"),
        (
            ["--algo", "sac", "--env", "Pendulum-v1", "--sparsity", "0.9", "--learners", "2"],
            "--learners 2",
        ),
        (
            ["--env-backend", "envpool", "--algo", "sac", "--env", "dmc:cartpole-swingup"],
            "env 'dmc:cartpole-swingup' is not one the envpool backend covers",
        ),
        (["--env-backend", "envpool", "--env", "minatar:breakout"], "use --env-backend gymnasium"),
        (["--env-backend", "envpool", "--algo", "ppo"], "need SAME_STEP autoreset"),
        (["--env-backend", "gym"], "invalid choice: 'gym'"),
        (["--ingest", "fork"], "invalid choice: 'fork'"),
        (["--algo", "ppo", "--ingest", "process"], "on-policy learners read segments"),
    ],
)
def test_bad_run_flags_fail_fast_with_one_line(tmp_path, flags: list[str], expected: str) -> None:
    result = _run(["-m", "actorq", "run", "--run-dir", str(tmp_path / "run"), *flags])
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "logs").exists()  # nothing was started


def test_cuda_learner_without_cuda_fails_before_starting(tmp_path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --learner-device cuda is valid here")
    result = _run(["-m", "actorq", "run", "--learner-device", "cuda:1", "--run-dir",
                   str(tmp_path / "run")])  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "learner device 'cuda:1'" in result.stderr and "available: cpu" in result.stderr
    assert "torch.cuda.is_available() is False" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "logs").exists()  # nothing was started


def test_unreachable_redis_names_the_url(tmp_path) -> None:
    url = f"redis://127.0.0.1:{find_free_port()}/0"
    result = _run(["-m", "actorq", "run", "--redis-url", url, "--run-dir", str(tmp_path / "r")])
    assert result.returncode == 2
    assert url in result.stderr and "Traceback" not in result.stderr


def test_service_on_a_taken_port_exits_2(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(
            ["-m", "services.quantizer"],
            env={
                "ACTORQ_REDIS_URL": redis_url,
                "ACTORQ_GRPC_PORT": str(port),
                "ACTORQ_METRICS_PORT": "-1",
            },
        )
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


# `actorq run` on an install without the envpool extra: the package is made absent the way
# Python knows it (sys.modules["envpool"] = None makes `import envpool` fail).
WITHOUT_ENVPOOL = "import sys; sys.modules['envpool'] = None; from actorq.cli import main; "


def test_envpool_backend_without_envpool_names_the_extra(tmp_path) -> None:
    argv = ["run", "--env-backend", "envpool", "--run-dir", str(tmp_path / "run")]
    result = _run(["-c", WITHOUT_ENVPOOL + f"sys.exit(main({argv!r}))"])
    assert result.returncode == 2, result.stderr
    assert "pip install 'actorq[envpool]'" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # nothing was started, not even the run folder


def test_actor_service_with_an_env_envpool_does_not_cover_exits_2() -> None:
    """ACTORQ_ENV_BACKEND=envpool on a service: refused before it connects to Redis (the
    URL below has nothing listening)."""
    env = {
        "ACTORQ_ENV_BACKEND": "envpool",
        "ACTORQ_ENV_ID": "minatar:breakout",
        "ACTORQ_REDIS_URL": f"redis://127.0.0.1:{find_free_port()}/0",
    }
    result = _run(["-m", "services.actor"], env=env)
    assert result.returncode == 2, result.stderr
    assert "'minatar:breakout' is not one the envpool backend covers" in result.stderr
    assert "Traceback" not in result.stderr


def test_service_with_bad_setting_exits_2() -> None:
    result = _run(["-m", "services.learner"], env={"ACTORQ_PRECISION": "int3"})
    assert result.returncode == 2
    assert "int3" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"ACTORQ_ALGO": "td3", "ACTORQ_SPARSITY_ACTOR": "1.5"}, "ACTORQ_SPARSITY_ACTOR"),
        ({"ACTORQ_ALGO": "dqn", "ACTORQ_SPARSITY_CRITIC": "0.9"}, "'dqn'"),
    ],
)
def test_learner_with_bad_sparse_setting_exits_2(env: dict[str, str], expected: str) -> None:
    result = _run(["-m", "services.learner"], env={"ACTORQ_ENV_ID": "Pendulum-v1", **env})
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_more_learners_than_cores_fail_fast_naming_both(tmp_path) -> None:
    cores = len(os.sched_getaffinity(0))
    if cores >= 16:
        pytest.skip(f"{cores} cores: --learners stops at 16, so it cannot exceed them here")
    flags = ["--learners", str(cores + 1)]
    result = _run(["-m", "actorq", "run", "--run-dir", str(tmp_path / "run"), *flags])
    assert result.returncode == 2, result.stderr
    assert f"--learners {cores + 1}: this machine gives the run {cores} CPU core(s)" in (
        result.stderr
    )
    assert not (tmp_path / "run").exists()  # nothing started
