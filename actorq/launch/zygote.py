"""A pre-imported parent for the services of `actorq run`: import torch once, fork many.

Every service imports torch, numpy, gymnasium, grpc and redis (about 1.5 CPU-seconds on
this project's 2-core machines); started as five separate interpreters they queue for
the cores and the first env step comes ~6 s after launch. The zygote is one process that
imports all of that once and then forks a child per service on request; a fork costs
milliseconds and the children share the imported pages.

Fork safety: the zygote stays single-threaded and never runs a torch op or opens a gRPC
channel before forking (OpenMP and gRPC set up their threads lazily, in the child).

Protocol (JSON lines): the launcher writes {"module", "env", "log", "niceness", "cpus"} to the
zygote's stdin; the zygote answers {"pid": N} and, when a child exits, {"exit": N,
"code": C, "cpu": S} (negative C: killed by signal -C, as subprocess reports it; S: the
child's user + system CPU seconds up to its exit, from wait4). Children run in
their own session and die with the zygote, which dies with the launcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import runpy
import select
import signal
import subprocess
import sys
import threading

from actorq.procutil import bound_to_parent, die_with_parent

# What the services import before their main() runs; everything else imports in the child.
PRELOAD = (
    "numpy",
    "torch",
    "gymnasium",
    "grpc",
    "redis",
    "prometheus_client",
    "services.learner.main",
    "services.actor.main",
    "services.quantizer.main",
    "actorq.actor.preload",  # numba and the actors' compiled kernels, loaded once
)


def main() -> None:
    die_with_parent()
    import setproctitle  # set up now, on the intact argv/environ memory it rewrites later

    setproctitle.getproctitle()
    for module in sys.argv[1:] or PRELOAD:
        __import__(module)
    _reply({"ready": True})
    children: set[int] = set()
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            data = os.read(0, 1 << 16)
            if not data:
                break  # the launcher closed the pipe: nothing more to start
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                children.add(_fork_service(json.loads(line)))
        _reap(children)
    while children:  # report the remaining exits, then go
        _reap(children, block=True)


def _fork_service(request: dict) -> int:
    zygote_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child never returns from here
        _run_child(request, zygote_pid)
    _reply({"pid": pid})
    return pid


def _run_child(request: dict, zygote_pid: int) -> None:
    code = 1
    try:
        os.setsid()
        niceness, cpus = int(request.get("niceness", 0)), tuple(request.get("cpus", ()))
        die_with_parent(niceness, parent_pid=zygote_pid, cpus=cpus)
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdin = open(0)  # noqa: SIM115 (the process's own stdin, kept for its life)
        sys.stdout = open(1, "w", buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        _name_process(request["module"])
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        sys.argv = [request["module"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed log must not hide the exit code
                stream.flush()
        os._exit(code)


def _name_process(module: str) -> None:
    """Show the service in ps/top as a spawned one would look (with its run folder), not
    as another copy of the zygote: operators and the orphan checks read it there."""
    import setproctitle

    run_dir = os.environ.get("ACTORQ_RUN_DIR", "")
    setproctitle.setproctitle(f"{sys.executable} -m {module} {run_dir}".rstrip())


def _reap(children: set[int], block: bool = False) -> None:
    # wait4, not waitpid: the child's rusage comes with its exit, and only its parent (this
    # zygote, not the launcher) can read it once it is gone.
    while children:
        try:
            pid, status, usage = os.wait4(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        _reply({"exit": pid, "code": code, "cpu": usage.ru_utime + usage.ru_stime})
        if block:
            return


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


# --- the launcher's side ------------------------------------------------------------------
# The exit code reported for a child whose zygote was killed before reporting its exit
# (the child was killed with it; its real status is lost): SIGKILL's, as the kernel sent.
LOST_WITH_ZYGOTE = -signal.SIGKILL
LAUNCH_MODE_VAR = "ACTORQ_LAUNCH_MODE"  # "fork" (default): through the zygote; "spawn"


class Zygote:
    """The launcher's handle on a zygote process; `spawn` forks one service from it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._proc = proc
        self._lock = threading.Lock()
        self._pids: queue.Queue[int | None] = queue.Queue()
        self._exits: dict[int, int] = {}
        self._cpu: dict[int, float] = {}  # CPU seconds of exited children (wait4 rusage)
        self._exited = threading.Condition()
        self._gone = False  # the zygote's stdout ended: no more exits will be reported
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, preload: tuple[str, ...] = PRELOAD) -> Zygote | None:
        """Start one (it pre-imports `preload` in the background), or None when
        ACTORQ_LAUNCH_MODE is "spawn" (each service its own interpreter, as before)."""
        mode = os.environ.get(LAUNCH_MODE_VAR, "fork")
        if mode not in ("fork", "spawn"):
            raise ValueError(f"{LAUNCH_MODE_VAR}={mode!r}: expected 'fork' or 'spawn'")
        if mode == "spawn":
            return None
        prefix, preexec = bound_to_parent()
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "actorq.launch.zygote", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec,
        )
        return cls(proc)

    def spawn(
        self, module: str, env: dict[str, str], log: str, niceness: int, cpus: tuple[int, ...] = ()
    ) -> ZygoteChild:
        """Fork `python -m module` with `env`, output appended to `log`, on `cpus` (any if
        empty); waits for its pid."""
        request = {"module": module, "env": env, "log": log, "niceness": niceness}
        request["cpus"] = list(cpus)
        with self._lock:
            if self._proc.poll() is not None or self._proc.stdin is None:
                raise RuntimeError(f"the service zygote exited ({self._proc.returncode})")
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except BrokenPipeError:
                raise RuntimeError(f"the service zygote exited ({self._proc.poll()})") from None
            try:
                pid = self._pids.get(timeout=120)
            except queue.Empty as exc:
                raise RuntimeError("the service zygote did not fork within 120 s") from exc
            if pid is None:  # the reader's end-of-pipe mark: the zygote died
                self._pids.put(None)  # and stays dead for any later spawn
                raise RuntimeError(f"the service zygote exited ({self._proc.poll()})")
        return ZygoteChild(self, pid)

    def exit_code(self, pid: int) -> int | None:
        return self._exits.get(pid)

    def exit_cpu_seconds(self, pid: int) -> float | None:
        """User + system CPU seconds of an exited child, None while it runs."""
        return self._cpu.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._exited:
            self._exited.wait_for(lambda: pid in self._exits or self._gone, timeout)
            if pid not in self._exits and self._gone:
                # The zygote died (killed from outside) before reporting this child. Its
                # children die with it (PR_SET_PDEATHSIG) and are not ours to reap, so
                # waiting longer would hang the launcher's shutdown forever.
                self._exits[pid] = LOST_WITH_ZYGOTE
        return self._exits.get(pid)

    def close(self, timeout: float = 5.0) -> None:
        """No more services: the zygote reports the last exits and ends."""
        with self._lock:
            if self._proc.stdin is not None and not self._proc.stdin.closed:
                # A zygote killed from outside leaves a request its failed spawn buffered:
                # closing flushes it into the dead pipe (the file is closed all the same).
                with contextlib.suppress(BrokenPipeError):
                    self._proc.stdin.close()
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        try:
            for raw in self._proc.stdout:
                self._handle(json.loads(raw))
        finally:
            self._pids.put(None)  # wakes a spawn waiting for a pid that will never come
            with self._exited:
                self._gone = True
                self._exited.notify_all()

    def _handle(self, message: dict) -> None:
        if "pid" in message:
            self._pids.put(int(message["pid"]))
        elif "exit" in message:
            with self._exited:
                if "cpu" in message:
                    self._cpu[int(message["exit"])] = float(message["cpu"])
                self._exits[int(message["exit"])] = int(message["code"])
                self._exited.notify_all()


class ZygoteChild:
    """A forked service, with the part of subprocess.Popen's interface the launcher uses."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self._zygote, self.pid = zygote, pid

    @property
    def returncode(self) -> int | None:
        return self._zygote.exit_code(self.pid)

    @property
    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds up to its exit (reported by the zygote); None while
        it runs."""
        return self._zygote.exit_cpu_seconds(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    main()
