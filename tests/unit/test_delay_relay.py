"""The delay relay bench_links uses for RTT where the kernel has no netem: real sockets."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from actorq.testing.delay_relay import DelayRelay


@pytest.fixture
def echo_server():
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield server.getsockname()[:2]
    stop.set()
    t.join()
    server.close()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, "connection closed early"
        got += chunk
    return bytes(got)


@contextlib.contextmanager
def relayed(target: tuple[str, int], delay_s: float) -> Iterator[socket.socket]:
    """A client connection to `target` through a relay that delays each way by delay_s."""
    relay = DelayRelay("127.0.0.1", 0, target, delay_s=delay_s)
    with relay, socket.create_connection(("127.0.0.1", relay.port)) as conn:
        yield conn


def test_round_trip_takes_twice_the_delay_longer(echo_server):
    with relayed(echo_server, 0.05) as c:
        c.sendall(b"warm")
        _recv_exactly(c, 4)
        times = []
        for _ in range(5):
            t = time.monotonic()
            c.sendall(b"ping")
            assert _recv_exactly(c, 4) == b"ping"
            times.append(time.monotonic() - t)
    assert min(times) >= 0.1  # 50 ms each way
    assert sorted(times)[2] < 0.2  # and not delayed twice (median, for a loaded machine)


def test_bytes_arrive_intact_and_in_order(echo_server):
    payload = bytes(range(256)) * 8192  # 2 MiB
    with relayed(echo_server, 0.01) as c:
        sender = threading.Thread(target=c.sendall, args=(payload,))
        sender.start()
        echoed = _recv_exactly(c, len(payload))
        sender.join()
    assert echoed == payload


def test_chunks_in_flight_overlap_instead_of_queueing_behind_the_delay(echo_server):
    # A delay line: 20 messages sent back to back come back about one RTT later in all,
    # not 20 RTTs (a relay that slept per chunk before reading the next would).
    with relayed(echo_server, 0.05) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t = time.monotonic()
        for i in range(20):
            c.sendall(b"%04d" % i)
            time.sleep(0.005)
        echoed = _recv_exactly(c, 80)
        took = time.monotonic() - t
    assert echoed == b"".join(b"%04d" % i for i in range(20))
    assert 0.1 <= took < 1.0  # stop-and-wait would take 20 x 0.1 s


def test_closing_one_side_reaches_the_other(echo_server):
    with relayed(echo_server, 0.0) as c:
        c.sendall(b"bye")
        c.shutdown(socket.SHUT_WR)
        c.settimeout(5)
        assert _recv_exactly(c, 3) == b"bye"
        assert c.recv(1) == b""  # the echo server saw EOF and closed; so do we


def test_delay_out_of_range_is_refused():
    with pytest.raises(ValueError, match="delay_s"):
        DelayRelay("127.0.0.1", 0, ("127.0.0.1", 1), delay_s=-0.1)
