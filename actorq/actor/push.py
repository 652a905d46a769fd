"""An actor's push as one raw RESP write: MULTI, the commands, EXEC; replies read later.

redis-py's transaction pipeline spends tens of microseconds of Python per queued command.
`pack_transaction` frames the commands itself and passes each large argument (a batch's
columns) on uncopied. `Transaction.send` writes without waiting and `Transaction.result`
reads the replies at the next push, so Redis stores a batch while the actor steps its envs.
Until `result` returns the caller keeps the transaction; a failed read resends the same
payload under the client's retry policy. What Redis stores is what redis-py's pipeline
would send (tests/integration/test_actor_push.py compares the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

Command = tuple[Any, ...]

_LARGE = 16 * 1024  # arguments at least this long are sent as they are, not joined


def _arg_bytes(arg: Any) -> bytes | memoryview:
    if isinstance(arg, bytes | memoryview):
        return arg
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, int | float) and not isinstance(arg, bool):
        return repr(arg).encode()
    raise TypeError(f"a Redis command argument must be bytes, str, int or float, got {arg!r}")


def pack_transaction(commands: Sequence[Command]) -> list[bytes | memoryview]:
    """MULTI, `commands`, EXEC as RESP: a list of chunks for socket writes (small parts
    joined, large arguments passed through uncopied)."""
    chunks: list[bytes | memoryview] = []
    small = bytearray()
    for command in (("MULTI",), *commands, ("EXEC",)):
        small += b"*%d\r\n" % len(command)
        for arg in command:
            data = _arg_bytes(arg)
            size = len(data) if isinstance(data, bytes) else data.nbytes
            small += b"$%d\r\n" % size
            if size >= _LARGE:
                chunks.append(bytes(small))
                chunks.append(data)
                small = bytearray(b"\r\n")
            else:
                small += data
                small += b"\r\n"
    chunks.append(bytes(small))
    return chunks


def _read_replies(conn: redis.Connection, count: int) -> list[Any]:
    errors = []
    for _ in range(count + 1):  # +OK for MULTI, then +QUEUED (or an error) per command
        try:
            conn.read_response()
        except redis.ResponseError as exc:  # e.g. NOPERM: EXEC will answer EXECABORT
            errors.append(exc)
    try:
        results = conn.read_response()
    except redis.ResponseError:
        if errors:
            raise errors[0] from None
        raise
    for result in results:
        if isinstance(result, redis.ResponseError):
            raise result
    return results


class Transaction:
    """One MULTI/EXEC written now (`send`) and answered later (`result`)."""

    def __init__(self, client: redis.Redis, commands: Sequence[Command]) -> None:
        self.client = client
        self.count = len(commands)
        self.payload = pack_transaction(commands)
        self._conn: redis.Connection | None = None
        self._written = False

    def send(self) -> None:
        """Write the transaction without waiting for its replies. On a connection error
        nothing is raised here: `result` sends it again (under the retry policy)."""
        try:
            self._connection().send_packed_command(self.payload, check_health=True)
            self._written = True
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop_connection()

    def result(self) -> list[Any]:
        """EXEC's raw replies; resends the payload and reads again under the client's retry
        policy if the read fails or nothing was sent. Raises as a pipeline does (another
        `result` may retry) and the first ResponseError of a refused command."""
        try:
            if self._written:
                self._written = False
                try:
                    return _read_replies(self._connection(), self.count)
                except (redis.ConnectionError, redis.TimeoutError):
                    self._drop_connection()
            conn = self._connection()
            return conn.retry.call_with_retry(self._send_and_read, lambda _error: conn.disconnect())
        except BaseException:
            self._drop_connection()  # replies may be left unread: never reuse it as is
            raise
        finally:
            self._release()

    def _send_and_read(self) -> list[Any]:
        conn = self._connection()
        conn.send_packed_command(self.payload, check_health=True)
        return _read_replies(conn, self.count)

    def _connection(self) -> redis.Connection:
        if self._conn is None:
            self._conn = self.client.connection_pool.get_connection()
        return self._conn

    def _drop_connection(self) -> None:
        """Disconnect and hand the connection back (a later call takes a fresh one)."""
        if self._conn is not None:
            self._conn.disconnect()
            self._release()

    def _release(self) -> None:
        if self._conn is not None:
            self.client.connection_pool.release(self._conn)
            self._conn = None
