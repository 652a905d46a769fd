"""SIGTERM stops a service even when the kernel hands it to a worker thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A process-directed signal may land on any thread (it did under strace, with the learner's
# threads busy); CPython then only sets a flag, and a main thread parked in a plain
# Event.wait() never looks at it. `docker stop` would then SIGKILL the service after 10 s,
# with no final checkpoint.
CHILD = textwrap.dedent(
    """
    import os, signal, threading, time
    from actorq.service import ServiceRuntime

    runtime = ServiceRuntime("test")

    def deliver_to_this_worker_thread():
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    threading.Thread(target=deliver_to_this_worker_thread, daemon=True).start()
    runtime.wait()
    print("stopped:", runtime.stop_reason)
    """
)


def test_sigterm_on_a_worker_thread_still_stops_the_main_thread() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr
    assert "stopped: signal SIGTERM" in proc.stdout


# The handler runs on the main thread between bytecodes, possibly while that thread holds
# the stop event's own lock (inside its Event.wait). Event.set() from the handler then
# waited forever for its own thread: a learner trained on after "stopping: signal SIGTERM"
# and compose killed it at its stop timeout (exit 137). Here the main thread holds the
# event's lock when the handler runs, as it did at that instant.
HELD_LOCK_CHILD = textwrap.dedent(
    """
    import signal
    from actorq.service import ServiceRuntime

    runtime = ServiceRuntime("test")
    with runtime.stop_event._cond:
        runtime._on_signal(signal.SIGTERM, None)  # must return with the lock still held
    print("stopped:", runtime.stop_event.wait(5), runtime.stop_reason)
    """
)


def test_signal_arriving_while_main_thread_holds_the_event_lock_still_stops() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", HELD_LOCK_CHILD], capture_output=True, text=True, timeout=20
    )
    assert proc.returncode == 0, proc.stderr
    assert "stopped: True signal SIGTERM" in proc.stdout
