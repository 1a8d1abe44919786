"""The stream log interface every store implements, and the bookkeeping they share.

A stream is an append-only log of messages. Every message gets the next offset (0, 1, 2, ...) and
its append time in ms (never earlier than the previous one's: the log's timestamps are monotonic
even if the broker's clock steps back). The log is split into segments; retention removes whole old
segments, never the active (last) one, so ``first`` moves up in segment-sized steps.

Chunks (RabbitMQ/osiris): the appends between two syncs form a chunk; ``last_chunk`` is the first
offset of the last chunk (what ``x-stream-offset: last`` means). ``committed``: every offset below
it is durable (covered by a completed ``sync``); a consumer that must only see durable data reads
with ``upto=log.committed``.

Server-side tracking (sansmq extensions): named consumers store an offset (``store_offset``), and
producers are deduplicated by a publishing id that must grow (``should_append``). Both are durable
with the log and survive retention.

Threading: everything but ``sync`` runs on the broker's loop thread; ``sync`` runs on a server
worker thread while appends continue.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .._message import Message
from .._raw_message import RawMessage
from ..records import MessageEncoder
from ..store_types import StoreError
from .filtering import DEFAULT_FILTER_BYTES, ChunkFilters, StreamFilter

__all__ = ["StreamLog", "StreamRecord", "RawRecord", "BytesReads", "StreamSettings", "SegmentStats", "retained_from",
           "DEFAULT_SEGMENT_BYTES"]

#: ``read`` defaults: a batch is bounded by count and by bytes (of message bodies)
READ_COUNT = 256
READ_BYTES = 1 << 20
#: records a filtered read looks at, at most, per call
FILTER_SCAN = 4096
#: a stream segment's size before a new one starts (RabbitMQ's x-stream-max-segment-size-bytes default)
DEFAULT_SEGMENT_BYTES = 500_000_000


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """Retention and segmenting of one stream (see ``args.stream_settings``)."""

    max_bytes: int | None = None
    max_age_ms: int | None = None
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    #: bytes of each chunk's Bloom filter (``x-stream-filter-size-bytes``)
    filter_bytes: int = DEFAULT_FILTER_BYTES


class StreamRecord(NamedTuple):
    offset: int
    timestamp: int  # ms since the epoch, when it was appended
    message: Message


#: a record as stored: (offset, append time in ms, the message in ``engine.records``' encoding).
#: Delivering it needs no ``Message``: the protocol layer splices what it needs from the bytes
RawRecord = tuple[int, int, "bytes | memoryview"]


class BytesReads:
    """``read`` and ``read_raw`` of a log that keeps every message's bytes (segment files,
    PostgreSQL rows): one scan, ``_read``, that decodes them or not. Listed before ``StreamLog``."""

    def read(self, offset: int, max_count: int = READ_COUNT, max_bytes: int = READ_BYTES,
             upto: int | None = None) -> list[StreamRecord]:
        return self._read(offset, max_count, max_bytes, upto, False)  # type: ignore[return-value]

    def read_raw(self, offset: int, max_count: int = READ_COUNT, max_bytes: int = READ_BYTES,
                 upto: int | None = None) -> list[RawRecord]:
        return self._read(offset, max_count, max_bytes, upto, True)  # type: ignore[return-value]

    def _read(self, offset: int, max_count: int, max_bytes: int, upto: int | None,
              raw: bool) -> list[StreamRecord] | list[RawRecord]:
        raise NotImplementedError


class SegmentStats(NamedTuple):
    size: int  # bytes
    last_ts: int  # ms of its last message; -1 when it holds none


def retained_from(segments: Sequence[SegmentStats], settings: StreamSettings, now_ms: int) -> int:
    """How many of the oldest ``segments`` retention removes: while the total is above
    ``max_bytes`` or the oldest segment's newest message is older than ``max_age``; never the last
    (active) segment."""
    total = sum(s.size for s in segments)
    n = 0
    while n < len(segments) - 1:
        seg = segments[n]
        over = settings.max_bytes is not None and total > settings.max_bytes
        old = settings.max_age_ms is not None and seg.last_ts < now_ms - settings.max_age_ms
        if not (over or old):
            break
        total -= seg.size
        n += 1
    return n


class RunInterrupted(StoreError):
    """``StreamLog.append_run`` stopped by the store: the first ``taken`` messages were appended
    (or dropped as duplicates), the next one and the rest were not."""

    def __init__(self, message: str, taken: int) -> None:
        super().__init__(message)
        self.taken = taken


class StreamLog(ABC):
    """One stream's log. Offsets in ``[first, tail)`` are readable."""

    #: ``read`` returns messages decoded for the caller alone (it may change their headers)
    private_reads = False

    def __init__(self, settings: StreamSettings | None) -> None:
        self.settings = settings or StreamSettings()
        #: the oldest offset still kept
        self.first = 0
        #: the offset the next append gets
        self.tail = 0
        #: offsets below this are durable
        self.committed = 0
        #: first offset of the last chunk, -1 while the log is empty
        self.last_chunk = -1
        self._last_ts = 0
        self._consumers: dict[str, int] = {}
        self._producers: dict[str, int] = {}
        #: records found torn or unreadable when the log was opened (never confirmed)
        self.dropped_on_recovery = 0
        #: every chunk's filter (stores call ``add`` from ``_append``, and persist or rebuild them)
        self.chunk_filters = ChunkFilters(self.settings.filter_bytes)
        #: records filtered reads decoded (a statistic: chunks skipped are never decoded)
        self.filter_decoded = 0
        self._raw_encoder = MessageEncoder()

    # -- appending --------------------------------------------------------------------------------
    def should_append(self, producer: str, publishing_id: int) -> bool:
        """False when ``publishing_id`` is not above the last one appended for ``producer`` (a
        duplicate: confirm it, do not append it)."""
        last = self._producers.get(producer)
        return last is None or publishing_id > last

    def append(self, msg: Message, now: float, producer: str | None = None,
               publishing_id: int | None = None) -> int | None:
        """Append ``msg`` at time ``now`` (seconds); returns its offset, or None when ``producer``'s
        ``publishing_id`` is a duplicate (nothing appended). Raises ``StoreError`` when the store
        cannot take it (nothing appended either)."""
        if producer is not None:
            if publishing_id is None or publishing_id < 0:
                raise ValueError("a producer's message needs a publishing id >= 0")
            if not self.should_append(producer, publishing_id):
                return None
        ts = max(int(now * 1000), self._last_ts)
        offset = self.tail
        chunk_start, rolled = self._append(offset, ts, msg, producer, publishing_id)
        self._last_ts = ts
        self.tail = offset + 1
        if chunk_start:
            self.last_chunk = offset
        if producer is not None:
            self._producers[producer] = publishing_id  # type: ignore[assignment]
        if rolled:
            self.apply_retention(now)
        return offset

    def append_run(self, msgs: Sequence[RawMessage], now: float) -> None:
        """``append`` each of ``msgs`` in order (a publisher's run: one call per run, each record
        stored by ``_append`` as ``append`` stores it), each deduplicated by its own
        ``producer``/``publishing_id``. A ``StoreError`` on one stops the run: raised as
        ``RunInterrupted`` saying how many were taken (appended or dropped) before it."""
        ts = max(int(now * 1000), self._last_ts)
        producers = self._producers
        store = self._append
        for i, msg in enumerate(msgs):
            producer = msg.producer
            pid = msg.publishing_id  # >= 0 when there is a producer (``amqp.stream_shapes`` checked it)
            if producer is not None:
                last = producers.get(producer)
                if last is not None and pid <= last:  # type: ignore[operator]
                    continue  # a duplicate: confirmed, not appended
            offset = self.tail
            try:
                chunk_start, rolled = store(offset, ts, msg, producer, pid)
            except StoreError as exc:
                raise RunInterrupted(str(exc), i) from exc
            self._last_ts = ts
            self.tail = offset + 1
            if chunk_start:
                self.last_chunk = offset
            if producer is not None:
                producers[producer] = pid  # type: ignore[assignment]
            if rolled:
                self.apply_retention(now)

    @abstractmethod
    def _append(self, offset: int, ts: int, msg: Message, producer: str | None,
                publishing_id: int | None) -> tuple[bool, bool]:
        """Store one record; returns (it starts a chunk, a new segment was started)."""

    # -- tracking ---------------------------------------------------------------------------------
    def store_offset(self, consumer: str, offset: int, now: float) -> None:
        """Remember ``consumer``'s offset (durable with the next sync)."""
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if self._consumers.get(consumer) == offset:
            return
        self._track(consumer, offset, max(int(now * 1000), self._last_ts))
        self._consumers[consumer] = offset

    @abstractmethod
    def _track(self, consumer: str, offset: int, ts: int) -> None: ...

    def stored_offset(self, consumer: str) -> int | None:
        return self._consumers.get(consumer)

    def last_publishing_id(self, producer: str) -> int | None:
        return self._producers.get(producer)

    def consumers(self) -> dict[str, int]:
        return dict(self._consumers)

    def producers(self) -> dict[str, int]:
        return dict(self._producers)

    # -- reading ----------------------------------------------------------------------------------
    @abstractmethod
    def read(self, offset: int, max_count: int = READ_COUNT, max_bytes: int = READ_BYTES,
             upto: int | None = None) -> list[StreamRecord]:
        """Records from ``offset`` (raised to ``first``) in order, below ``upto`` (default: the
        tail), at most ``max_count`` of them and, past the first, bodies of at most ``max_bytes``
        in all. Empty at the end of the log."""

    def read_raw(self, offset: int, max_count: int = READ_COUNT, max_bytes: int = READ_BYTES,
                 upto: int | None = None) -> list[RawRecord]:
        """``read``, each message as its stored bytes (``max_bytes`` bounds those). This default
        encodes what ``read`` decoded (the logs that keep messages as objects); a log that stores
        the bytes returns them as they are."""
        encode = self._raw_encoder.encode
        return [(rec.offset, rec.timestamp, encode(rec.message))
                for rec in self.read(offset, max_count, max_bytes, upto)]

    def read_filtered(self, offset: int, filt: StreamFilter, max_count: int = READ_COUNT,
                      upto: int | None = None, scan: int = FILTER_SCAN) -> tuple[list[StreamRecord], int]:
        """The records from ``offset`` below ``upto`` that ``filt`` matches (at most ``max_count``),
        and the offset to read on from. Chunks whose filter rules a match out are skipped without
        reading them; the others are read and their non-matching messages dropped. At most about
        ``scan`` records are read per call (a consumer far behind does not stall the loop)."""
        offset, end = self._bounds(offset, upto)
        out: list[StreamRecord] = []
        chunks = self.chunk_filters
        seen = 0
        while offset < end and len(out) < max_count and seen < scan:
            offset, stop = chunks.span(offset, end, filt)
            if offset >= stop:
                break
            batch = self.read(offset, max_count=min(READ_COUNT, scan - seen), upto=stop)
            if not batch:
                break
            self.filter_decoded += len(batch)
            for rec in batch:
                seen += 1
                offset = rec.offset + 1
                if filt.matches(rec.message):
                    out.append(rec)
                    if len(out) >= max_count:
                        break
        return out, offset

    def _bounds(self, offset: int, upto: int | None) -> tuple[int, int]:
        """A read's first offset (raised to ``first``) and its end (``upto``, at most the tail)."""
        return max(offset, self.first), self.tail if upto is None else min(upto, self.tail)

    @abstractmethod
    def offset_at(self, ts_ms: int) -> int:
        """The first offset appended at or after ``ts_ms``; the tail if none is."""

    def end_within_bytes(self, start: int, budget: int, upto: int | None = None) -> int:
        """Where a read from ``start`` (raised to ``first``) should end so that the records in
        between take at most ``budget`` bytes as the store holds them (the memory and PostgreSQL logs
        count each record as its encoded message plus ``memory.RECORD_OVERHEAD``, what retention
        counts; segment files the span of file the records fill): at least one record, so a
        reader always progresses, and never past the committed end (nor ``upto``). ``start``
        itself when nothing is there to read (past the end: ``start``, not the end)."""
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"a byte budget must be an integer >= 1, got {budget!r}")
        committed = min(self.committed, self.tail)
        lo, end = self._bounds(start, committed if upto is None else min(upto, committed))
        if lo >= end:
            return max(start, end)
        return max(lo + 1, self._end_within_bytes(lo, end, budget))

    @abstractmethod
    def _end_within_bytes(self, start: int, end: int, budget: int) -> int:
        """The largest ``x`` in [start, end] such that the records [start, x) take at most ``budget``
        bytes (``start`` is readable and below ``end``)."""

    # -- retention ----------------------------------------------------------------------------------
    def apply_retention(self, now: float) -> int:
        """Remove whole old segments as the settings say; returns how many messages went."""
        n = retained_from(self._segment_stats(), self.settings, int(now * 1000))
        if not n:
            return 0
        before = self.first
        self.first = self._drop_segments(n)
        self.chunk_filters.drop_below(self.first)
        return self.first - before

    @abstractmethod
    def _segment_stats(self) -> list[SegmentStats]: ...

    @abstractmethod
    def _drop_segments(self, n: int) -> int:
        """Remove the ``n`` oldest segments; returns the new ``first``."""

    @property
    @abstractmethod
    def size_bytes(self) -> int: ...

    @property
    def segment_count(self) -> int:
        return len(self._segment_stats())

    def __len__(self) -> int:
        return self.tail - self.first

    # -- a cluster node that does not lead the stream ---------------------------------------------
    def refresh(self) -> None:  # noqa: B027 - optional: only a log other processes write changes under us
        """Read the log's extent and tracking back from the storage its leader writes."""

    def refresh_offset(self, consumer: str) -> None:  # noqa: B027 - optional, as ``refresh``
        """Read ``consumer``'s stored offset back from the storage (another node may have stored it)."""

    def followed_to(self, tail: int) -> bool:
        """The stream's leader committed every offset below ``tail``: readable here now. False
        when that is nothing new."""
        if tail <= self.committed:
            return False
        self.tail = self.committed = tail
        return True

    # -- durability -------------------------------------------------------------------------------
    def sync(self) -> None:  # noqa: B027 - optional: logs kept in memory have nothing to sync
        """Make everything appended so far durable (a worker thread); closes the current chunk."""

    def close(self) -> None:  # noqa: B027 - optional: only logs holding files close them
        pass
