"""An actor's push as one raw RESP write: MULTI, the commands, EXEC.

redis-py's transaction pipeline spends tens of microseconds of Python per queued command
(argument checks and packing, one parsed +QUEUED reply, a response callback), while Redis
itself spends ~2.4 us on an XADD here. An actor with a random or weak policy finishes
several episodes per vector step, one XADD each, and those were the largest part of its
push (docs/actor-throughput.md). Here hiredis packs each command in C and the replies are
read without callbacks. The commands, and so what Redis stores, are the ones the
pipeline sent (tests/integration/test_actor_push.py compares the two), with the same
MULTI/EXEC all-or-nothing and the client's retry policy around the whole transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

try:  # hiredis ships with actorq's redis extra; redis-py's own packer is the fallback
    from hiredis import pack_command as _pack_command
except ImportError:  # pragma: no cover - exercised only without hiredis
    _pack_command = None

Command = tuple[Any, ...]


def _packed(conn: redis.Connection, commands: Sequence[Command]) -> list[bytes]:
    framed = [("MULTI",), *commands, ("EXEC",)]
    if _pack_command is not None:
        return [b"".join(_pack_command(c) for c in framed)]
    return conn.pack_commands(framed)


def _send_and_read(conn: redis.Connection, payload: list[bytes], count: int) -> list[Any]:
    conn.send_packed_command(payload, check_health=True)
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


def execute_transaction(client: redis.Redis, commands: Sequence[Command]) -> list[Any]:
    """Run `commands` in one MULTI/EXEC round trip; return EXEC's replies (raw: bytes,
    ints, lists). Raises redis.ConnectionError / TimeoutError as a pipeline does (after the
    client's retries) and the first ResponseError of a refused command."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        payload = _packed(conn, commands)
        return conn.retry.call_with_retry(
            lambda: _send_and_read(conn, payload, len(commands)),
            lambda error: conn.disconnect(),
        )
    except BaseException:
        conn.disconnect()  # replies may be left unread: never reuse this connection as is
        raise
    finally:
        pool.release(conn)
