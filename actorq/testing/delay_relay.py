"""A TCP relay that adds a fixed one-way delay in each direction: RTT for kernels without netem.

`tc netem` is how a link gets its round-trip time; where the kernel lacks it
(CONFIG_NET_SCH_NETEM not set, as on this project's development machines) bench_links puts
this relay in front of each service the actors reach over a shaped link. Every chunk read
from one side is written to the other `delay_s` after it arrived, and reading goes on
while earlier chunks wait, so the relay is a delay line: a request and its reply each
take `delay_s` longer (RTT + 2 x delay_s) while throughput stays the link's.

What it does not emulate: the relay ends TCP on both sides, so the senders' congestion
windows see the veth's RTT, not the added one. At the rates bench_links uses (20-100
Mbit/s x 20-40 ms = 50-500 KB in flight) Linux's default windows are large enough that
netem would not slow a bulk transfer either; request/response latency is what the delay
changes, and that the relay reproduces.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from dataclasses import dataclass, field

_CHUNK = 256 * 1024


@dataclass
class DelayRelay:
    """Listen on (listen_host, listen_port); forward each connection to target, delayed.

    listen_port 0 picks a free port (see `.port` after `start()`).
    """

    listen_host: str
    listen_port: int
    target: tuple[str, int]
    delay_s: float
    port: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)
    _sockets: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if not 0 <= self.delay_s <= 10:
            raise ValueError(f"delay_s: expected 0..10 seconds, got {self.delay_s}")

    def start(self) -> DelayRelay:
        server = socket.create_server((self.listen_host, self.listen_port), backlog=64)
        server.settimeout(0.2)
        self.port = server.getsockname()[1]
        self._sockets.append(server)
        self._spawn(self._accept, server)
        return self

    def close(self) -> None:
        self._stop.set()
        for s in list(self._sockets):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv; close does not
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(2)

    def __enter__(self) -> DelayRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, target, *args) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self, server: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(s)
            self._pipe(client, upstream)
            self._pipe(upstream, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        """One direction: a reader stamps chunks, a writer sends each when it is due."""
        line: queue.SimpleQueue = queue.SimpleQueue()
        self._spawn(self._read, src, line)
        self._spawn(self._write, dst, line)

    def _read(self, src: socket.socket, line: queue.SimpleQueue) -> None:
        while True:
            try:
                data = src.recv(_CHUNK)
            except OSError:
                data = b""
            line.put((time.monotonic() + self.delay_s, data))
            if not data:  # EOF (or the relay closing): the writer passes it on
                return

    def _write(self, dst: socket.socket, line: queue.SimpleQueue) -> None:
        while True:
            due, data = line.get()
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                return
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            try:
                dst.sendall(data)
            except OSError:
                return
