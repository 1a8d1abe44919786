"""In-memory stream logs for ``MemoryStore`` and the simulation ``FakeStore`` (engine.testing).

Segments are offset ranges sized by the same message codec the segment store writes, so retention
behaves as on disk. With ``autocommit`` (a store that needs no sync) every append is committed at
once; otherwise ``commit()`` (the store's successful sync) moves ``committed`` and closes the chunk,
and ``crashed()`` returns what a restart would find: only committed records and tracking.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from .._message import Message
from .._raw_message import RawMessage
from ..records import _encode_message
from ._log import READ_BYTES, READ_COUNT, SegmentStats, StreamLog, StreamRecord, StreamSettings

__all__ = ["MemoryStreamLog", "MemoryStreams"]

#: per-record overhead counted towards a segment's size (framing, offset, timestamp)
RECORD_OVERHEAD = 25

Guard = Callable[[str], None]


class _VSeg:
    """A virtual segment: offsets [first, end), its size and newest timestamp."""

    __slots__ = ("first", "end", "size", "last_ts")

    def __init__(self, first: int) -> None:
        self.first = first
        self.end = first
        self.size = 0
        self.last_ts = -1


class MemoryStreamLog(StreamLog):
    def __init__(self, settings: StreamSettings | None = None, autocommit: bool = True,
                 guard: Guard | None = None) -> None:
        super().__init__(settings)
        self.autocommit = autocommit
        self._guard = guard
        self._msgs: list[Message] = []  # offsets [first, tail)
        self._ts = array("q")
        #: running total of record sizes after each record (``end_within_bytes`` bisects it), and
        #: the total before the first one kept
        self._sizes_to = array("q")
        self._sizes_before = 0
        self._segs: list[_VSeg] = [_VSeg(0)]
        self._chunk_open = False
        self._durable_consumers: dict[str, int] = {}
        self._durable_producers: dict[str, int] = {}

    def _append(self, offset: int, ts: int, msg: Message, producer: str | None,
                publishing_id: int | None) -> tuple[bool, bool]:
        if self._guard is not None:
            self._guard("stream append")
        size = len(_encode_message(msg)) + RECORD_OVERHEAD
        if type(msg) is RawMessage:  # kept and read back as the plain message it stands for
            msg = msg.plain()
        seg = self._segs[-1]
        rolled = seg.end > seg.first and seg.size + size > self.settings.segment_bytes
        if rolled:
            seg = _VSeg(offset)
            self._segs.append(seg)
        seg.end = offset + 1
        seg.size += size
        seg.last_ts = ts
        self._msgs.append(msg)
        self._ts.append(ts)
        self._sizes_to.append((self._sizes_to[-1] if self._sizes_to else self._sizes_before) + size)
        chunk_start = not self._chunk_open or rolled
        self._chunk_open = not self.autocommit
        self.chunk_filters.add(offset, chunk_start, msg, seg.first == offset)
        if self.autocommit:
            self.committed = offset + 1
            if producer is not None:
                self._durable_producers[producer] = publishing_id  # type: ignore[assignment]
        return chunk_start, rolled

    def _track(self, consumer: str, offset: int, ts: int) -> None:
        if self._guard is not None:
            self._guard("stream store_offset")
        if self.autocommit:
            self._durable_consumers[consumer] = offset

    def read(self, offset: int, max_count: int = READ_COUNT, max_bytes: int = READ_BYTES,
             upto: int | None = None) -> list[StreamRecord]:
        offset, end = self._bounds(offset, upto)
        out: list[StreamRecord] = []
        nbytes = 0
        while offset < end and len(out) < max_count and (not out or nbytes < max_bytes):
            i = offset - self.first
            msg = self._msgs[i]
            if out and nbytes + len(msg.body) > max_bytes:
                break
            out.append(StreamRecord(offset, self._ts[i], msg))
            nbytes += len(msg.body)
            offset += 1
        return out

    def offset_at(self, ts_ms: int) -> int:
        return self.first + bisect_left(self._ts, ts_ms)

    def _end_within_bytes(self, start: int, end: int, budget: int) -> int:
        i = start - self.first
        limit = (self._sizes_to[i - 1] if i else self._sizes_before) + budget
        return self.first + bisect_right(self._sizes_to, limit, i, end - self.first)

    def _segment_stats(self) -> list[SegmentStats]:
        return [SegmentStats(s.size, s.last_ts) for s in self._segs]

    def _drop_segments(self, n: int) -> int:
        new_first = self._segs[n].first
        k = new_first - self.first
        del self._segs[:n]
        del self._msgs[:k]
        del self._ts[:k]
        if k:
            self._sizes_before = self._sizes_to[k - 1]
            del self._sizes_to[:k]
        return new_first

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segs)

    # -- FakeStore's sync and crash -------------------------------------------------------------------
    def commit(self) -> None:
        self.committed = self.tail
        self._chunk_open = False
        self._durable_consumers = dict(self._consumers)
        self._durable_producers = dict(self._producers)

    def crashed(self, guard: Guard | None = None) -> MemoryStreamLog:
        """The log a restart finds: committed records and tracking only."""
        log = MemoryStreamLog(self.settings, self.autocommit, guard)
        keep = self.committed - self.first
        log.first = self.first
        log.tail = log.committed = self.committed
        log._msgs = self._msgs[:keep]
        log._ts = self._ts[:keep]
        log._sizes_to, log._sizes_before = self._sizes_to[:keep], self._sizes_before
        log._segs = []
        for s in self._segs:
            if s.first >= self.committed and log._segs:
                break
            v = _VSeg(s.first)
            v.end, v.size, v.last_ts = min(s.end, self.committed), s.size, s.last_ts
            log._segs.append(v)
        log.last_chunk = self.last_chunk if self.last_chunk < self.committed else -1
        for first, bloom, unfiltered in self.chunk_filters.between(self.first, self.committed):
            log.chunk_filters.load(first, bloom, unfiltered)
        log.chunk_filters.end = self.committed if log.chunk_filters.firsts else 0
        log._last_ts = log._ts[-1] if log._ts else 0
        log._consumers = dict(self._durable_consumers)
        log._producers = dict(self._durable_producers)
        log._durable_consumers, log._durable_producers = dict(log._consumers), dict(log._producers)
        return log


class MemoryStreams:
    """A store's stream logs by (vhost, name), kept in memory."""

    def __init__(self, autocommit: bool = True, guard: Guard | None = None) -> None:
        self.autocommit = autocommit
        self.guard = guard
        self.logs: dict[tuple[str, str], MemoryStreamLog] = {}

    def open(self, vhost: str, name: str, settings: StreamSettings | None) -> MemoryStreamLog:
        log = self.logs.get((vhost, name))
        if log is None:
            log = self.logs[(vhost, name)] = MemoryStreamLog(settings, self.autocommit, self.guard)
        elif settings is not None:
            log.settings = settings
        return log

    def delete(self, vhost: str, name: str) -> None:
        self.logs.pop((vhost, name), None)

    def commit(self) -> None:
        for log in self.logs.values():
            log.commit()

    def crashed(self, guard: Guard | None = None) -> MemoryStreams:
        """What a restart finds (see ``MemoryStreamLog.crashed``); ``guard`` for the survivor."""
        out = MemoryStreams(self.autocommit, guard)
        out.logs = {k: v.crashed(guard) for k, v in self.logs.items()}
        return out
