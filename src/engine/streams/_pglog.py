"""Stream logs in PostgreSQL (the ``PostgresStore``).

Tables (in the store's schema)::

    streams          (id, vhost, name, last_chunk)
    stream_segments  (stream, first, end_offset, size, last_ts)   one row per (virtual) segment
    stream_records   (stream, offset, ts, payload)                 PRIMARY KEY (stream, offset)
    stream_tracking  (stream, kind, name, value)                   kind 0: consumer offset,
                                                                   kind 1: producer publishing id
    stream_chunks    (stream, first, filter, unfiltered)           a chunk's filter (``filtering``)

A chunk is the appends of one batch (one sync); its filter row is written with its records, so
the filters cover every committed record from the first chunk written with filtering on (a
stream written before has no rows: those offsets are read message by message).

A segment is an offset range, cut when its records reach ``segment_bytes`` (the same codec and
overhead as on disk); retention deletes whole segments (their rows and records), never the last.
Tracking rows are not tied to segments, so they survive retention.

Appends and tracking go into one ``StreamWork`` item of the store's batch (created on the first
stream change after a sync took the batch), so they are written in the store's one transaction per
sync, with ``unnest`` statements; the commit moves ``committed`` and a new chunk starts with the
next batch. Every statement is idempotent (``ON CONFLICT``), so a batch put back after a failed
commit is replayed safely. Records not yet committed are read from memory; committed ones through
a second connection used only for reads on the loop thread (short indexed range queries).

In a cluster (``storage.postgres.cluster``) every node opens every stream's log, but only the
stream's leader appends, applies retention and stores producers' ids; ``StreamWork.led`` names the
streams whose rows a batch writes so, and the node's transaction fences them with the lease's
epoch (a fenced batch loses them: ``StreamWork.without``). Another node reads the committed records
as the leader does; ``refresh`` reloads a log's extent, chunk and tracking as the leader left them
(a consumer attaching, a takeover, a step-down) and the leader's feed moves its end on
(``StreamLog.followed_to``, ``engine.cluster.relay``). Consumer offsets are stored by the node the
consumer is on, unfenced (they are the consumer's, not the log's).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from typing import Any, Protocol, TypeVar

import psycopg

from .._message import Message
from ..records import _decode_message, _encode_message
from ..store import StoreError
from ._log import BytesReads, RawRecord, SegmentStats, StreamLog, StreamRecord, StreamSettings
from .filtering import ChunkFilters
from .memory import RECORD_OVERHEAD, _VSeg


class PostgresStore(Protocol):
    """What the stream logs use of the ``PostgresStore`` that owns them (named here, not imported:
    the store imports this module)."""

    schema: str
    _lock: threading.Lock
    _batch: list[Any]

    def _check_writable(self) -> None: ...

    def _connect(self) -> psycopg.Connection[Any]: ...

__all__ = ["PgStreamLog", "PgStreams", "StreamWork", "stream_ddl"]

DDL = """
CREATE TABLE IF NOT EXISTS {s}.streams (
    id bigint PRIMARY KEY,
    vhost text NOT NULL,
    name text NOT NULL,
    last_chunk bigint NOT NULL DEFAULT -1,
    UNIQUE (vhost, name)
);
CREATE TABLE IF NOT EXISTS {s}.stream_segments (
    stream bigint NOT NULL,
    first bigint NOT NULL,
    end_offset bigint NOT NULL,
    size bigint NOT NULL,
    last_ts bigint NOT NULL,
    PRIMARY KEY (stream, first)
);
CREATE TABLE IF NOT EXISTS {s}.stream_records (
    stream bigint NOT NULL,
    "offset" bigint NOT NULL,
    ts bigint NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (stream, "offset")
);
CREATE INDEX IF NOT EXISTS stream_records_ts ON {s}.stream_records (stream, ts);
CREATE TABLE IF NOT EXISTS {s}.stream_chunks (
    stream bigint NOT NULL,
    first bigint NOT NULL,
    filter bytea NOT NULL,
    unfiltered boolean NOT NULL,
    PRIMARY KEY (stream, first)
);
CREATE TABLE IF NOT EXISTS {s}.stream_tracking (
    stream bigint NOT NULL,
    kind smallint NOT NULL,
    name text NOT NULL,
    value bigint NOT NULL,
    PRIMARY KEY (stream, kind, name)
);
"""

SQL = {
    "add_streams": (
        "INSERT INTO {s}.streams (id, vhost, name) SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[])"
        " ON CONFLICT DO NOTHING"
    ),
    "delete_streams": "DELETE FROM {s}.streams WHERE id = ANY(%s::bigint[])",
    "delete_streams_segments": "DELETE FROM {s}.stream_segments WHERE stream = ANY(%s::bigint[])",
    "delete_streams_records": "DELETE FROM {s}.stream_records WHERE stream = ANY(%s::bigint[])",
    "delete_streams_tracking": "DELETE FROM {s}.stream_tracking WHERE stream = ANY(%s::bigint[])",
    "delete_streams_chunks": "DELETE FROM {s}.stream_chunks WHERE stream = ANY(%s::bigint[])",
    "put_chunks": (
        "INSERT INTO {s}.stream_chunks (stream, first, filter, unfiltered)"
        " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bytea[], %s::boolean[])"
        " ON CONFLICT (stream, first) DO UPDATE SET filter = EXCLUDED.filter, unfiltered = EXCLUDED.unfiltered"
    ),
    "drop_chunks": (
        "DELETE FROM {s}.stream_chunks c USING unnest(%s::bigint[], %s::bigint[]) AS u(s, f)"
        " WHERE c.stream = u.s AND c.first < u.f"
    ),
    "load_chunks": "SELECT stream, first, filter, unfiltered FROM {s}.stream_chunks ORDER BY stream, first",
    "load_stream_chunks": "SELECT first, filter, unfiltered FROM {s}.stream_chunks WHERE stream = %s ORDER BY first",
    "put_records": (
        'INSERT INTO {s}.stream_records (stream, "offset", ts, payload)'
        " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bytea[]) ON CONFLICT DO NOTHING"
    ),
    "put_segments": (
        "INSERT INTO {s}.stream_segments (stream, first, end_offset, size, last_ts)"
        " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[])"
        " ON CONFLICT (stream, first) DO UPDATE SET end_offset = EXCLUDED.end_offset, size = EXCLUDED.size,"
        " last_ts = EXCLUDED.last_ts"
    ),
    "put_tracking": (
        "INSERT INTO {s}.stream_tracking (stream, kind, name, value)"
        " SELECT * FROM unnest(%s::bigint[], %s::smallint[], %s::text[], %s::bigint[])"
        " ON CONFLICT (stream, kind, name) DO UPDATE SET value = EXCLUDED.value"
    ),
    "drop_records": (
        'DELETE FROM {s}.stream_records r USING unnest(%s::bigint[], %s::bigint[]) AS u(s, f)'
        ' WHERE r.stream = u.s AND r."offset" < u.f'
    ),
    "drop_segments": (
        "DELETE FROM {s}.stream_segments g USING unnest(%s::bigint[], %s::bigint[]) AS u(s, f)"
        " WHERE g.stream = u.s AND g.first < u.f"
    ),
    "set_chunks": (
        "UPDATE {s}.streams t SET last_chunk = u.c FROM unnest(%s::bigint[], %s::bigint[]) AS u(s, c)"
        " WHERE t.id = u.s"
    ),
    "load_streams": "SELECT id, vhost, name, last_chunk FROM {s}.streams",
    # one stream as another cluster node left it (``PgStreamLog.refresh``)
    "load_stream": "SELECT id, last_chunk FROM {s}.streams WHERE vhost = %s AND name = %s",
    "load_stream_segments": (
        "SELECT first, end_offset, size, last_ts FROM {s}.stream_segments WHERE stream = %s ORDER BY first"
    ),
    "load_stream_tracking": "SELECT kind, name, value FROM {s}.stream_tracking WHERE stream = %s",
    "load_offset": "SELECT value FROM {s}.stream_tracking WHERE stream = %s AND kind = 0 AND name = %s",
    "load_segments": "SELECT stream, first, end_offset, size, last_ts FROM {s}.stream_segments ORDER BY stream, first",
    "load_tracking": "SELECT stream, kind, name, value FROM {s}.stream_tracking",
    "read": (
        'SELECT "offset", ts, payload FROM {s}.stream_records WHERE stream = %s AND "offset" >= %s'
        ' AND "offset" < %s ORDER BY "offset" LIMIT %s'
    ),
    # the first offset whose running total of record sizes from the start passes the budget (the
    # window streams in offset order through the primary key: the scan stops at that row)
    "end_within_bytes": (
        'SELECT "offset" FROM (SELECT "offset", sum(length(payload) + %s) OVER (ORDER BY "offset") AS total'
        ' FROM {s}.stream_records WHERE stream = %s AND "offset" >= %s AND "offset" < %s) AS running'
        ' WHERE total > %s ORDER BY "offset" LIMIT 1'
    ),
    "offset_at": (
        'SELECT min("offset") FROM {s}.stream_records WHERE stream = %s AND ts >= %s AND "offset" >= %s'
    ),
}
CONSUMER, PRODUCER = 0, 1


def _quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def stream_ddl(schema: str) -> str:
    return DDL.replace("{s}", _quoted(schema))


_Key = TypeVar("_Key", bound=tuple[Any, ...])


def _forget_keys(pending: dict[_Key, Any], sid: int) -> None:
    """Drop the pending changes of stream ``sid`` (keys start with the stream's id)."""
    for k in [k for k in pending if k[0] == sid]:
        del pending[k]


def _columns(pending: dict[Any, tuple[Any, ...]]) -> list[list[Any]]:
    """The rows (key columns, then value columns) of ``pending`` as one list per column (for unnest)."""
    return [list(col) for col in zip(*(k + v for k, v in pending.items()), strict=True)]


class StreamWork:
    """Stream changes between two syncs: one item of the PostgreSQL store's batch."""

    __slots__ = ("sql", "new", "deleted", "records", "segments", "tracking", "drops", "chunks", "filters", "tails",
                 "led")

    def __init__(self, sql: dict[str, str]) -> None:
        self.sql = sql
        self.new: list[tuple[int, str, str]] = []
        self.deleted: list[int] = []
        self.records: list[tuple[int, int, int, Message]] = []
        self.segments: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.tracking: dict[tuple[int, int, str], int] = {}
        self.drops: dict[int, int] = {}
        self.chunks: dict[int, int] = {}
        #: (stream, chunk's first offset) -> (its filter, holds an unfiltered message)
        self.filters: dict[tuple[int, int], tuple[bytes, bool]] = {}
        self.tails: dict[PgStreamLog, int] = {}
        #: streams whose records, segments or producers this batch writes -> (vhost, name): the
        #: writes only the stream's leader may make (a cluster node fences them)
        self.led: dict[int, tuple[str, str]] = {}

    def forget(self, sid: int) -> None:
        """A stream deleted in this batch: none of its pending changes are written."""
        self.new = [n for n in self.new if n[0] != sid]
        _forget_keys(self.tracking, sid)
        self.without({sid})
        self.deleted.append(sid)

    def without(self, sids: set[int]) -> None:
        """Drop the leader's writes (records, segments, producers, retention) of streams ``sids``:
        a cluster node fenced off them (their new leader has the log now). Consumer offsets stay."""
        self.records = [r for r in self.records if r[0] not in sids]
        for sid in sids:
            _forget_keys(self.segments, sid)
            _forget_keys(self.filters, sid)
            self.drops.pop(sid, None)
            self.chunks.pop(sid, None)
            self.led.pop(sid, None)
        self.tracking = {k: v for k, v in self.tracking.items() if k[0] not in sids or k[1] == CONSUMER}
        self.tails = {log: t for log, t in self.tails.items() if log.sid not in sids}

    def write(self, cur: Any) -> None:
        q = self.sql
        if self.deleted:
            for name in ("delete_streams_records", "delete_streams_segments", "delete_streams_tracking",
                         "delete_streams_chunks", "delete_streams"):
                cur.execute(q[name], (self.deleted,))
        if self.new:
            cur.execute(q["add_streams"], tuple(map(list, zip(*self.new, strict=True))))
        if self.records:  # encoded here, on the worker thread
            cur.execute(q["put_records"], ([r[0] for r in self.records], [r[1] for r in self.records],
                                           [r[2] for r in self.records],
                                           [_encode_message(r[3]) for r in self.records]))
        if self.segments:
            cur.execute(q["put_segments"], _columns(self.segments))
        if self.filters:
            cur.execute(q["put_chunks"], _columns(self.filters))
        if self.tracking:
            tracked = list(self.tracking)
            cur.execute(q["put_tracking"], ([k[0] for k in tracked], [k[1] for k in tracked],
                                            [k[2] for k in tracked], list(self.tracking.values())))
        if self.drops:
            args = (list(self.drops), list(self.drops.values()))
            cur.execute(q["drop_records"], args)
            cur.execute(q["drop_segments"], args)
            cur.execute(q["drop_chunks"], args)
        if self.chunks:
            cur.execute(q["set_chunks"], (list(self.chunks), list(self.chunks.values())))

    def committed(self) -> None:
        for log, tail in self.tails.items():
            log._committed_to(tail)


class PgStreamLog(BytesReads, StreamLog):
    def __init__(self, streams: PgStreams, sid: int, settings: StreamSettings | None,
                 key: tuple[str, str] = ("", "")) -> None:
        super().__init__(settings)
        self.sid = sid
        self.key = key  # (vhost, name)
        self._streams = streams
        self._segs: list[_VSeg] = []
        self._work: StreamWork | None = None  # the batch item of the current chunk
        #: appended records not yet committed: (offset, ts, message), in offset order
        self._unwritten: deque[tuple[int, int, Message]] = deque()

    # -- appending (loop thread) ----------------------------------------------------------------------
    def _append(self, offset: int, ts: int, msg: Message, producer: str | None,
                publishing_id: int | None) -> tuple[bool, bool]:
        store = self._streams.store
        store._check_writable()
        size = len(_encode_message(msg)) + RECORD_OVERHEAD
        with store._lock:
            work = self._streams.work()
            seg = self._segs[-1] if self._segs else None
            rolled = seg is not None and seg.end > seg.first and seg.size + size > self.settings.segment_bytes
            if seg is None or rolled:
                seg = _VSeg(offset)
                self._segs.append(seg)
            seg.end = offset + 1
            seg.size += size
            seg.last_ts = ts
            chunk_start = work is not self._work or rolled
            self._work = work
            work.records.append((self.sid, offset, ts, msg))
            work.segments[(self.sid, seg.first)] = (seg.end, seg.size, seg.last_ts)
            if chunk_start:
                work.chunks[self.sid] = offset
            filters = self.chunk_filters
            filters.add(offset, chunk_start, msg, seg.first == offset)
            first, bloom, unfiltered = filters.row(len(filters.firsts) - 1)
            work.filters[(self.sid, first)] = (bloom, unfiltered)
            if producer is not None:
                work.tracking[(self.sid, PRODUCER, producer)] = publishing_id  # type: ignore[assignment]
            work.tails[self] = offset + 1
            work.led[self.sid] = self.key
            self._unwritten.append((offset, ts, msg))
        return chunk_start, rolled

    def _track(self, consumer: str, offset: int, ts: int) -> None:
        store = self._streams.store
        store._check_writable()
        with store._lock:
            self._streams.work().tracking[(self.sid, CONSUMER, consumer)] = offset

    def _committed_to(self, tail: int) -> None:
        """The commit covering offsets below ``tail`` succeeded (worker thread, under the store's lock)."""
        if tail > self.committed:
            self.committed = tail
        while self._unwritten and self._unwritten[0][0] < tail:
            self._unwritten.popleft()

    def refresh(self) -> None:
        """Read the log's extent, chunk and tracking back from the database, as another cluster
        node (its leader) left them: what is appended in memory and not committed is dropped (a
        node that did not lead the stream, or lost its lease, has nothing of its own to add)."""
        streams = self._streams
        found = streams.query("load_stream", *self.key)
        if not found:  # its row is not committed yet: still empty here
            return
        sid, chunk = found[0]
        segs = []
        for first, end, size, last_ts in streams.query("load_stream_segments", sid):
            seg = _VSeg(first)
            seg.end, seg.size, seg.last_ts = end, size, last_ts
            segs.append(seg)
        tracking = streams.query("load_stream_tracking", sid)
        chunks = streams.query("load_stream_chunks", sid)
        with streams.store._lock:
            self.sid = sid
            self._work = None
            self._unwritten.clear()
            self._segs = segs
            self.last_chunk = chunk
            self._consumers = {name: value for kind, name, value in tracking if kind == CONSUMER}
            self._producers = {name: value for kind, name, value in tracking if kind == PRODUCER}
            if segs:
                self.first = segs[0].first
                self.tail = self.committed = segs[-1].end
                self._last_ts = max(0, max(s.last_ts for s in segs))
            self._load_chunks(chunks)

    def _load_chunks(self, rows: list[tuple[Any, ...]]) -> None:
        """The chunk filters stored for the committed records."""
        filters = self.chunk_filters = ChunkFilters(self.settings.filter_bytes)
        for first, bloom, unfiltered in rows:
            filters.load(first, bytes(bloom), unfiltered)
        filters.end = self.tail

    def refresh_offset(self, consumer: str) -> None:
        rows = self._streams.query("load_offset", self.sid, consumer)
        if rows:  # the later of the two: one stored here may not be committed yet
            self._consumers[consumer] = max(rows[0][0], self._consumers.get(consumer, -1))

    # -- reading (loop thread) ------------------------------------------------------------------------
    def _read(self, offset: int, max_count: int, max_bytes: int, upto: int | None,
              raw: bool) -> list[StreamRecord] | list[RawRecord]:
        """``read`` (decoded messages) or ``read_raw`` (the rows' payloads as they are; the records
        not written yet encoded)."""
        offset, end = self._bounds(offset, upto)
        with self._streams.store._lock:
            committed = self.committed
            pending = [r for r in self._unwritten if r[0] >= offset] if end > committed else []
        rows: list[tuple[int, int, Any]] = []
        if offset < min(end, committed):
            rows = self._streams.query("read", self.sid, offset, min(end, committed), max_count)
        out: list[Any] = []
        nbytes = 0
        for o, ts, payload in rows:
            item: Any
            if raw:  # a bound on the body's size: headers are few
                item, size = (o, ts, bytes(payload)), len(payload)
            else:
                msg = _decode_message(memoryview(payload))
                item, size = StreamRecord(o, ts, msg), len(msg.body)
            if out and nbytes + size > max_bytes:
                return out
            out.append(item)
            nbytes += size
        for o, ts, msg in pending:
            if o < offset or (out and out[-1][0] >= o):
                continue
            if o >= end or len(out) >= max_count or (out and nbytes + len(msg.body) > max_bytes):
                break
            out.append((o, ts, _encode_message(msg)) if raw else StreamRecord(o, ts, msg))
            nbytes += len(msg.body)
        return out[:max_count]

    def offset_at(self, ts_ms: int) -> int:
        row = self._streams.query("offset_at", self.sid, ts_ms, self.first)
        if row and row[0][0] is not None and row[0][0] < self.committed:
            return int(row[0][0])
        with self._streams.store._lock:
            pending = list(self._unwritten)
        i = bisect_left([r[1] for r in pending], ts_ms)
        return pending[i][0] if i < len(pending) else self.tail

    def _end_within_bytes(self, start: int, end: int, budget: int) -> int:
        """A record's bytes: its payload (the encoded message) plus ``RECORD_OVERHEAD``, summed
        in the database; ``end`` is at most the committed end, so every record is there. Every
        record takes more than ``RECORD_OVERHEAD`` bytes, so no more than ``budget //
        (RECORD_OVERHEAD + 1)`` of them fit: the rows looked at are bounded so even when the
        planner, without statistics yet, sorts instead of walking the primary key."""
        end = min(end, start + budget // (RECORD_OVERHEAD + 1) + 1)
        row = self._streams.query("end_within_bytes", RECORD_OVERHEAD, self.sid, start, end, budget)
        return int(row[0][0]) if row else end

    # -- retention --------------------------------------------------------------------------------------
    def _segment_stats(self) -> list[SegmentStats]:
        return [SegmentStats(s.size, s.last_ts) for s in self._segs]

    def _drop_segments(self, n: int) -> int:
        store = self._streams.store
        with store._lock:
            del self._segs[:n]
            first = self._segs[0].first
            work = self._streams.work()
            work.drops[self.sid] = first
            work.led[self.sid] = self.key
            while self._unwritten and self._unwritten[0][0] < first:
                self._unwritten.popleft()
        return first

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segs)


class PgStreams:
    """The stream logs of a ``PostgresStore``: metadata loaded at open, logs made on first use."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any]) -> None:
        self.store = store
        self.sql = {k: v.replace("{s}", _quoted(store.schema)) for k, v in SQL.items()}
        #: the batch item stream changes go to (None after a sync took the batch)
        self.current: StreamWork | None = None
        self.logs: dict[tuple[str, str], PgStreamLog] = {}
        self._read_conn: psycopg.Connection[Any] | None = None
        self._known: dict[tuple[str, str], tuple[int, int]] = {}  # stored streams: id, last chunk
        self._segs: dict[int, list[_VSeg]] = {}
        self._tracking: dict[int, list[tuple[int, str, int]]] = {}
        self._chunks: dict[int, list[tuple[Any, ...]]] = {}
        self._next_id = 1
        for sid, vhost, name, chunk in conn.execute(self.sql["load_streams"]):
            self._known[(vhost, name)] = (sid, chunk)
            self._next_id = max(self._next_id, sid + 1)
        for sid, first, end, size, last_ts in conn.execute(self.sql["load_segments"]):
            seg = _VSeg(first)
            seg.end, seg.size, seg.last_ts = end, size, last_ts
            self._segs.setdefault(sid, []).append(seg)
        for sid, kind, name, value in conn.execute(self.sql["load_tracking"]):
            self._tracking.setdefault(sid, []).append((kind, name, value))
        for sid, first, bloom, unfiltered in conn.execute(self.sql["load_chunks"]):
            self._chunks.setdefault(sid, []).append((first, bloom, unfiltered))

    def work(self) -> StreamWork:
        """The batch item for stream changes (caller holds the store's ``_lock``)."""
        w = self.current
        if w is None:
            w = self.current = StreamWork(self.sql)
            self.store._batch.append(w)
        return w

    def own_ids(self, lo: int, hi: int) -> None:
        """New streams get ids in ``[lo, hi)`` (a cluster node's id space: nodes never collide)."""
        self._next_id = max([lo + 1] + [sid + 1 for sid, _ in self._known.values() if lo <= sid < hi])

    def open(self, vhost: str, name: str, settings: StreamSettings | None, create: bool = True) -> PgStreamLog:
        """The log of stream ``name``: loaded, or new (``create``; else another cluster node made it:
        read from the database)."""
        log = self.logs.get((vhost, name))
        if log is not None:
            if settings is not None:
                log.settings = settings
            return log
        known = self._known.pop((vhost, name), None)
        if known is None and not create:
            log = PgStreamLog(self, -1, settings, (vhost, name))
            log.refresh()
        elif known is None:
            self.store._check_writable()
            sid = self._next_id
            self._next_id += 1
            log = PgStreamLog(self, sid, settings, (vhost, name))
            with self.store._lock:
                self.work().new.append((sid, vhost, name))
        else:
            sid, chunk = known
            log = PgStreamLog(self, sid, settings, (vhost, name))
            log._segs = self._segs.pop(sid, [])
            if log._segs:
                log.first = log._segs[0].first
                log.tail = log.committed = log._segs[-1].end
                log._last_ts = max(0, max(s.last_ts for s in log._segs))
            log.last_chunk = chunk
            log._load_chunks(self._chunks.pop(sid, []))
            for kind, tname, value in self._tracking.pop(sid, []):
                (log._consumers if kind == CONSUMER else log._producers)[tname] = value
        self.logs[(vhost, name)] = log
        return log

    def forget(self, vhost: str, name: str) -> None:
        """Another cluster node deleted the stream (and its rows): no log of it here any more."""
        self.logs.pop((vhost, name), None)
        self._known.pop((vhost, name), None)

    def delete(self, vhost: str, name: str) -> None:
        log = self.logs.pop((vhost, name), None)
        known = self._known.pop((vhost, name), None)
        sid = log.sid if log is not None else known[0] if known is not None else None
        if sid is None:
            return
        self._segs.pop(sid, None)
        self._tracking.pop(sid, None)
        self._chunks.pop(sid, None)
        with self.store._lock:
            self.work().forget(sid)

    def query(self, name: str, *params: Any) -> list[tuple[Any, ...]]:
        """A read on the loop thread, through the read connection."""
        try:
            conn = self._read_conn
            if conn is None or conn.closed or conn.broken:
                conn = self._read_conn = self.store._connect()
            return conn.execute(self.sql[name], params).fetchall()
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"PostgreSQL store: stream read failed ({type(exc).__name__}: {exc})") from None

    def close(self) -> None:
        conn, self._read_conn = self._read_conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # a broken connection may fail to close: it is gone either way
                pass
