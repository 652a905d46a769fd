"""Replay through Redis: actors append batches to a stream, the learner mirrors it locally.

Writers XADD one encoded `TransitionBatch` per stream entry (capped with approximate
MAXLEN) and INCRBY the inserted counter in the same MULTI/EXEC, so the counter always
equals the transitions the stream has acknowledged. The reader XREADs new entries into a
`ReplayStorage`, and after a learner restart `rebuild()` reads the whole stream again, so
nothing Redis acknowledged is lost.

Connection errors propagate as `redis.ConnectionError`; callers decide how to reconnect.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

import numpy as np
import redis

from actorq.obs_codec import check_codec
from actorq.redis_keys import RedisKeys
from actorq.replay.batch import ReplayDecodeError, TransitionBatch, decode_batch, encode_batch
from actorq.replay.bulk import decode_run, layout_of
from actorq.replay.sampler import Sampler
from actorq.replay.storage import ReplayStorage

log = logging.getLogger(__name__)

Entry = tuple[bytes, dict[bytes, bytes]]

BULK_READ_COUNT = 512
"""Entries one bulk poll asks for: 16,384 CartPole transitions (~1 MB) at 32 per entry
(more per call amortises the round trip and the per-call Python; BENCHMARKS.md "Learner ingest")."""


class RedisReplayWriter:
    """Appends transition batches to the replay stream (used by actors)."""

    def __init__(
        self, client: redis.Redis, keys: RedisKeys, maxlen_entries: int, obs_codec: str = "none"
    ) -> None:
        """`obs_codec` compresses pixel observations (replay format "3"; actorq.obs_codec)."""
        if maxlen_entries < 1:
            raise ValueError(f"maxlen_entries must be >= 1, got {maxlen_entries}")
        check_codec(obs_codec)
        self._client = client
        self._keys = keys
        self.maxlen_entries = maxlen_entries
        self.obs_codec = obs_codec

    def write(self, batch: TransitionBatch) -> int:
        """Write one batch in one round trip; return its size once Redis acknowledged it."""
        return self.write_many([batch])

    def write_many(self, batches: Iterable[TransitionBatch]) -> int:
        """Write several batches in one round trip; return the transitions acknowledged.

        MULTI/EXEC (not a bare pipeline) so a dropped connection can never leave an entry
        without its counter increment, or the reverse. Delivery is at least once: if the
        reply to EXEC is lost and the client retries, the batch is stored twice (entry and
        count alike).
        """
        batches = list(batches)
        if not batches:
            return 0
        pipe = self._client.pipeline(transaction=True)
        for batch in batches:
            self.queue(pipe, batch)
        pipe.execute()
        return sum(len(b) for b in batches)

    def commands(self, batch: TransitionBatch) -> list[tuple]:
        """The commands `queue` adds, as argument tuples (actorq.actor.push sends them)."""
        fields = encode_batch(batch, self.obs_codec)
        stream, maxlen = self._keys.replay_stream, self.maxlen_entries
        xadd = (
            "XADD",
            stream,
            "MAXLEN",
            "~",
            str(maxlen),
            "*",
            *chain.from_iterable(fields.items()),
        )
        return [xadd, ("INCRBY", self._keys.inserted_counter, len(batch))]

    def queue(self, pipe: redis.client.Pipeline, batch: TransitionBatch) -> None:
        """Add one batch (its entry and its counter increment) to `pipe`, a MULTI/EXEC
        pipeline the caller executes, possibly with other commands in the same trip."""
        fields: Any = encode_batch(batch, self.obs_codec)
        pipe.xadd(self._keys.replay_stream, fields, maxlen=self.maxlen_entries, approximate=True)
        pipe.incrby(self._keys.inserted_counter, len(batch))


def read_inserted(client: redis.Redis, keys: RedisKeys) -> int:
    """Transitions Redis has acknowledged so far (0 before the first write)."""
    value = client.get(keys.inserted_counter)
    return int(value) if value is not None else 0


class RedisReplayReader:
    """Mirrors the replay stream into a local `ReplayStorage` (used by the learner).

    With `shard=(i, n)` it keeps only the entries whose id hashes to share i of n (one
    share per data-parallel learner). Malformed entries are skipped, counted in
    `rejected` (and per reason in `rejected_by_reason`) and logged once per reason; they
    never stop ingestion.

    `bulk=True` (the default) reads raw replies (no per-entry dict) and decodes runs of
    entries column by column (actorq.replay.bulk), falling back to the plain per-entry
    path for anything the bulk path does not take whole; `bulk=False` is the plain path
    alone. Both store the same rows in the same order (tests/unit/test_replay_bulk.py).
    `read_count` is how many entries one poll asks for.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        storage: ReplayStorage,
        sampler: Sampler | None = None,
        shard: tuple[int, int] = (0, 1),
        bulk: bool = True,
        read_count: int = BULK_READ_COUNT,
    ) -> None:
        if read_count < 1:
            raise ValueError(f"read_count must be >= 1, got {read_count}")
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("the replay reader needs a client with decode_responses=False")
        index, count = shard
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"shard must be (index, count) with 0 <= index < count, got {shard}")
        self.shard = shard
        self._client = client
        self._keys = keys
        self.storage = storage
        self.sampler = sampler
        self.last_id = "0-0"
        self.added = 0
        self.rejected = 0
        self.rejected_by_reason: Counter[str] = Counter()
        self.bulk = bulk
        self.bulk_rows = 0  # transitions the bulk path stored (the rest went entry by entry)
        self.read_count = read_count
        self._raw = _raw_client(client) if bulk else None

    def poll(self, block_ms: int = 100, count: int | None = None) -> int:
        """Read up to `count` entries (default `read_count`) after `last_id`; return the
        transitions added.

        Waits up to `block_ms` for new entries when none are there (0 or less: no wait).
        `block_ms` must stay below the client's socket timeout.
        """
        count = self.read_count if count is None else count
        if self._raw is None:
            return self.poll_plain(block_ms, count)
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self._check_block(block_ms)
        stream = self._keys.replay_stream
        reply = self._raw.xread(
            {stream: self.last_id}, count=count, block=block_ms if block_ms > 0 else None
        )
        return self.ingest_raw(_raw_stream_entries(reply, stream))

    def poll_plain(self, block_ms: int = 100, count: int = 512) -> int:
        """`poll` on the plain path: redis-py's parsed reply, one entry at a time."""
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        self._check_block(block_ms)
        stream = self._keys.replay_stream
        reply = self._client.xread(
            {stream: self.last_id}, count=count, block=block_ms if block_ms > 0 else None
        )
        return self._ingest(_stream_entries(reply, stream))

    def rebuild(self, page_size: int = 1024) -> int:
        """Read the whole stream from its start into storage; return the transitions added.

        Used on a fresh storage after a learner restart. Pages with XRANGE so a long stream
        never needs one huge reply; afterwards `poll` continues after the last entry read.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.last_id = "0-0"
        added, start = 0, "-"
        client = self._raw or self._client
        while True:
            page: Any = client.xrange(self._keys.replay_stream, start, "+", count=page_size)
            added += self.ingest_raw(page) if self._raw is not None else self._ingest(page)
            if len(page) < page_size:
                return added
            start = "(" + self.last_id

    def _ingest(self, entries: Sequence[Entry]) -> int:
        """Decode and store entries in order; advance `last_id` past every one of them."""
        added = 0
        for entry_id, fields in entries:
            entry = _id_str(entry_id)
            if self._mine(entry):
                added += self._ingest_one(entry, fields)
            self.last_id = entry
        self.added += added
        return added

    def ingest_raw(self, entries: Sequence[tuple[bytes, list[bytes]]]) -> int:
        """Store raw entries ([id, [name, value, ...]]) in order, runs of one field layout
        in bulk; advance `last_id` past every one of them."""
        if not entries:
            return 0
        last_id = _id_str(entries[-1][0])
        if self.shard[1] > 1:
            entries = [e for e in entries if self._mine(_id_str(e[0]))]
        added = 0
        for layout, run in _runs(entries):
            added += self._ingest_run(layout, run)
        self.last_id = last_id
        self.added += added
        return added

    def _ingest_run(self, layout: tuple[bytes, ...] | None, run: list[Any]) -> int:
        decoded = None
        flat = self.storage.obs_layout[0] == np.float32  # pixel storages: plain path
        if layout is not None and flat and self.storage.links is None:
            decoded = decode_run(
                [fields for _, fields in run], layout, self.storage.obs_dim, self.storage.act_dim
            )
        if decoded is None:  # the plain path decides, entry by entry
            return sum(self._ingest_one(_id_str(i), _pairs(f)) for i, f in run)
        columns, rows = decoded
        indices = self.storage.add_rows(columns, rows)
        if self.sampler is not None:
            self.sampler.on_insert(indices)
        self.bulk_rows += rows
        return rows

    def _mine(self, entry_id: str) -> bool:
        """Whether this reader's shard holds the entry (parallel learners split the stream).

        A hash of the entry id, so every learner, and the same learner after a restart,
        agrees on the split without coordination.
        """
        index, count = self.shard
        return count == 1 or zlib.crc32(entry_id.encode()) % count == index

    def _ingest_one(self, entry_id: str, fields: dict[bytes, bytes]) -> int:
        try:
            batch = decode_batch(fields)
        except ReplayDecodeError as exc:
            self._reject(entry_id, exc.reason, str(exc))
            return 0
        if batch.obs_dim != self.storage.obs_dim:
            msg = f"obs_dim {batch.obs_dim} != storage obs_dim {self.storage.obs_dim}"
            self._reject(entry_id, "obs_dim_mismatch", msg)
            return 0
        if (batch.obs.dtype, batch.obs_shape) != self.storage.obs_layout:  # pixels vs flat
            msg = f"obs {batch.obs.dtype} {batch.obs_shape} != storage's {self.storage.obs_layout}"
            self._reject(entry_id, "obs_shape_mismatch", msg)
            return 0
        if batch.act_dim != self.storage.act_dim:  # continuous vs discrete, or another env
            msg = f"act_dim {batch.act_dim} != storage act_dim {self.storage.act_dim}"
            self._reject(entry_id, "act_dim_mismatch", msg)
            return 0
        indices = self.storage.add(batch)
        if self.sampler is not None:
            self.sampler.on_insert(indices)
        return len(batch)

    def _reject(self, entry_id: str, reason: str, message: str) -> None:
        self.rejected += 1
        self.rejected_by_reason[reason] += 1
        if self.rejected_by_reason[reason] == 1:
            log.warning(
                "skipping malformed replay entry %s (%s): %s; further %r entries are "
                "counted but not logged",
                entry_id,
                reason,
                message,
                reason,
            )

    def _check_block(self, block_ms: int) -> None:
        timeout = self._client.get_connection_kwargs().get("socket_timeout")
        if block_ms > 0 and timeout is not None and block_ms >= timeout * 1000:
            raise ValueError(
                f"block_ms={block_ms} must be below the client's socket_timeout ({timeout} s)"
            )


def _stream_entries(reply: Any, stream: str) -> list[Entry]:
    """The entries of `stream` in an XREAD reply, for RESP2 (list) and RESP3 (dict) replies."""
    if not reply:
        return []
    if isinstance(reply, dict):
        found = reply.get(stream.encode()) or reply.get(stream) or [[]]
        return list(found[0])
    for name, entries in reply:
        if _id_str(name) == stream:
            return list(entries)
    return []


def _raw_stream_entries(reply: Any, stream: str) -> list[Any]:
    """The entries of `stream` in a raw XREAD reply: a {name: entries} map (how the
    parser returns it with or without hiredis here) or [[name, entries]] pairs."""
    if not reply:
        return []
    if isinstance(reply, dict):
        found = reply.get(stream.encode()) or reply.get(stream) or []
        nested = found and isinstance(found[0], list) and isinstance(found[0][0], list)
        return list(found[0]) if nested else list(found)
    return _stream_entries(reply, stream)


def _id_str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _raw_client(client: redis.Redis) -> redis.Redis:
    """A client on the same connection pool whose XREAD and XRANGE replies stay as the
    parser returned them: [id, [name, value, ...]] lists, not one dict per entry."""
    raw = redis.Redis(connection_pool=client.connection_pool)
    for command in ("XREAD", "XRANGE"):
        raw.set_response_callback(command, _as_is)
    return raw


def _as_is(response: Any, **_options: Any) -> Any:
    return response


def _runs(entries: Sequence[Any]) -> list[tuple[tuple[bytes, ...] | None, list[Any]]]:
    """Consecutive entries grouped by field layout, in stream order."""
    layouts = [layout_of(fields) for _, fields in entries]
    if not layouts:  # a shard that owns none of this poll's entries
        return []
    if layouts.count(layouts[0]) == len(layouts):  # the usual case: one writer format
        return [(layouts[0], list(entries))]
    runs: list[tuple[tuple[bytes, ...] | None, list[Any]]] = []
    for layout, entry in zip(layouts, entries, strict=True):
        if runs and runs[-1][0] == layout:
            runs[-1][1].append(entry)
        else:
            runs.append((layout, [entry]))
    return runs


def _pairs(fields: Any) -> dict[bytes, bytes]:
    """A raw entry's flat [name, value, ...] list as the dict redis-py would build."""
    if isinstance(fields, dict):
        return fields
    return dict(zip(fields[0::2], fields[1::2], strict=False)) if fields else {}
