"""Child processes of `actorq run`: start, health-wait, stop in order, never orphan.

Children run in their own session (terminal Ctrl-C reaches only the launcher, which then
stops them in order) and are asked by the kernel to die if the launcher dies
(PR_SET_PDEATHSIG), so no service outlives a killed launcher.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from actorq.launch.zygote import Zygote, ZygoteChild
from actorq.procutil import bound_to_parent
from actorq.rpc import make_channel


@dataclass
class ServiceProcess:
    """One service child: `python -m services.<module>` with ACTORQ_* settings."""

    name: str
    module: str
    env: dict[str, str]
    log_path: Path
    grpc_port: int
    niceness: int = 0  # >0 lowers the scheduling priority (actors yield CPU to the learner)
    cpus: tuple[int, ...] = ()  # cores it may run on (actorq.launch.cores); () = any
    zygote: Zygote | None = field(default=None, repr=False)  # fork from it when set
    # Argv put before the interpreter, e.g. ("ip", "netns", "exec", NS) to start the service
    # in another network namespace (bench_links); it must exec, keeping the pid.
    wrapper: tuple[str, ...] = ()
    host: str = "127.0.0.1"  # where its gRPC port is reached (health checks)
    proc: subprocess.Popen | ZygoteChild | None = field(default=None, repr=False)
    # CPU seconds up to exit: includes its shutdown work (see wait_stopped).
    final_cpu_seconds: float | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.final_cpu_seconds = None
        if self.zygote is not None and not self.wrapper:
            env = {**os.environ, **self.env}
            self.proc = self.zygote.spawn(
                self.module, env, str(self.log_path), self.niceness, self.cpus
            )
            return
        log = self.log_path.open("ab")
        prefix, preexec = bound_to_parent(self.niceness, self.cpus)
        self.proc = subprocess.Popen(
            [*prefix, *self.wrapper, sys.executable, "-m", self.module],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec,
        )
        log.close()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_healthy(self, timeout: float) -> None:
        """Block until the gRPC health service says SERVING; RuntimeError if it dies."""
        deadline = time.monotonic() + timeout
        channel = make_channel(self.address)
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            while time.monotonic() < deadline:
                if self.exit_code() == 0:
                    return  # done already (an actor whose env-step budget was tiny)
                if self.exit_code() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with code {self.exit_code()} during start-up; "
                        f"see {self.log_path}:\n{self.tail()}"
                    )
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.05)
        finally:
            channel.close()
        raise RuntimeError(f"{self.name} not healthy after {timeout:.0f}s; see {self.log_path}")

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> int:
        """Wait for exit; SIGKILL after `timeout`. Returns the exit code."""
        if self.proc is None:
            return 0
        if isinstance(self.proc, ZygoteChild):  # the zygote reaps it and reports its CPU
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
            self.final_cpu_seconds = self.proc.cpu_seconds
            return code
        if self._wait_exited_unreaped(timeout):
            self.final_cpu_seconds = self.cpu_seconds()
        else:
            self.proc.kill()
        return self.proc.wait()

    def _wait_exited_unreaped(self, timeout: float) -> bool:
        """Wait for exit without reaping (WNOWAIT), so /proc still holds the final CPU
        times; False on timeout. True too when it was already reaped (CPU then unknown).
        Spawn mode only: a forked service is the zygote's child, not ours."""
        assert isinstance(self.proc, subprocess.Popen)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                return True
            try:
                flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
                if os.waitid(os.P_PID, self.proc.pid, flags) is not None:
                    return True
            except ChildProcessError:  # reaped elsewhere (poll())
                return True
            time.sleep(0.02)
        return False

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds used so far (Linux /proc), None when unknown."""
        if self.proc is None:
            return None
        if isinstance(self.proc, ZygoteChild) and self.proc.returncode is not None:
            return self.proc.cpu_seconds  # reaped by the zygote, which read its rusage
        if self.proc.returncode is not None:  # reaped: its pid may belong to another process
            return self.final_cpu_seconds
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def stop_in_order(groups: list[list[ServiceProcess]], timeout: float = 15.0) -> None:
    """SIGTERM each group together, wait for it, then the next group."""
    for group in groups:
        for proc in group:
            proc.terminate()
        for proc in group:
            proc.wait_stopped(timeout)
