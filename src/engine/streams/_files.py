"""Stream logs in segment files (the embedded store; LavinMQ's and osiris' design).

On disk, under the data directory::

    streams/<key>/NAME                      vhost NUL name (utf-8), for people and tools
    streams/<key>/00000000000000000000.seg  segment files, named by their first offset

``<key>`` is a hash of (vhost, name), so any queue name makes a valid directory name. A segment file
is ``SMQSTRM1`` then records framed as in the segment store: ``<u32 length><u32 crc32(payload)>
<payload>``. A payload starts ``<u64 offset><i64 timestamp ms><u8 kind | flags>``:

- ``K_MSG``: a message at ``offset``, then (flag ``F_PRODUCER``) ``<u64 publishing id><u16 n>
  <producer name>``, then the message in the segment store's codec (``_records._encode_message``:
  properties, headers, body). Flag ``F_CHUNK`` marks the first record of a chunk; flag ``F_FILTER``
  (on every record written since stream filtering exists): ``<u32 n><filter value>`` (its
  ``x-stream-filter-value``; n = 0: unfiltered) follows the producer part, so a scan rebuilds the
  chunk filters without decoding messages. A record without it is from before: its value is not
  known, so its chunk matches every filter (its messages are checked one by one).
- ``K_TRACK``: consumer ``<name>`` (the rest of the payload) stored ``offset``.
- ``K_SNAP``: the first record of every segment: the whole tracking state at that point,
  ``<u32 consumers><u32 producers>`` then per entry ``<u64 value><u16 n><name>`` (consumers first).
  Retention deletes whole old segments, so the snapshot of the newest segment plus the records
  after it is always the complete state (osiris' tracking snapshots); opening reads only those.

A sealed segment gets a sidecar ``<first>.idx`` once a sync has fsynced all of it: ``SMQSIDX2``,
``<u64 first><u64 end><u64 size><i64 last ts><i64 last chunk><u32 entries>``, the three index
arrays (little-endian u64, u64, i64), its chunk filters (``<u32 chunks><u16 filter bytes>``, their
first offsets as u64, a byte per chunk saying it holds an unfiltered message, the filters) and a
crc32 of all that (an ``SMQSIDX1`` sidecar, from before filtering, is not used: the segment is
scanned). Opening loads a sealed segment's
index from its sidecar when the CRC and the segment's size match, so a restart reads only the
newest segment; otherwise (no sidecar, torn, stale) it scans the segment. Sidecars are not fsynced:
a lost one only costs a scan.

In memory each segment keeps a sparse index: three arrays (offset, file position, timestamp) with an
entry for its first message and then every ``INDEX_STRIDE`` messages or ``INDEX_BYTES`` bytes, plus
its first/end offsets, size and newest timestamp; nothing per message. A read seeks with the index
(or the position where the previous read of the same spot stopped) and reads sequentially.

Appends go to an in-memory buffer under ``_lock`` on the loop thread (a big buffer is written out
early). ``sync`` (a worker thread) pwrites every buffer, closes the current chunk, then fsyncs the
dup'd descriptors of every segment written since the last sync (one rolled over meanwhile included)
outside the lock, and only then moves ``committed``. A record after the last completed fsync may be
lost in a crash, nothing before it.

Opening scans the segments, validating every record's CRC; the first bad one ends the valid data of
its segment (a torn tail): the file is truncated there, later segments (never confirmed: the sync
that would have covered them also covers the torn one) are deleted, and the dropped records are
counted in ``dropped_on_recovery``. A torn record never yields a message.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from zlib import crc32

from .._message import Message
from ..fs import OS_FS, FileSystem
from ..records import _REC, MessageDecoder, MessageEncoder, _record, rewrite_unsynced, write_out
from ..store import StoreError
from ._log import BytesReads, RawRecord, SegmentStats, StreamLog, StreamRecord, StreamSettings
from ._segment import (
    F_CHUNK,
    F_FILTER,
    F_PRODUCER,
    FLUSH_AT,
    HEAD,
    INDEX_BYTES,
    INDEX_STRIDE,
    K_MSG,
    K_SNAP,
    K_TRACK,
    KIND,
    MAGIC,
    NO_FILTER,
    PROD,
    READ_BLOCK,
    SNAP,
    U32,
    Segment,
    filter_field,
    pack_names,
    segment_name,
    unpack_snapshot,
)
from .filtering import ChunkFilters, filter_value

__all__ = ["FileStreamLog"]

log = logging.getLogger("sansmq.store")
#: ``StreamRecord(o, ts, msg)`` without the named tuple's Python-level ``__new__`` (one per record read)
_new_record = partial(tuple.__new__, StreamRecord)

#: flags of every message record written (F_FILTER: its filter field follows; tests clear it to write
#: records as they were before filtering)
RECORD_FLAGS = F_FILTER
#: positions remembered where reads stopped (offset -> segment, position)
HINTS = 256


class FileStreamLog(BytesReads, StreamLog):
    """The log of one stream in directory ``path`` (created if missing)."""

    private_reads = True  # every read decodes anew

    def __init__(self, path: str, settings: StreamSettings | None = None, *, fsync: bool = True,
                 on_change: Callable[[FileStreamLog], None] | None = None, fs: FileSystem = OS_FS) -> None:
        super().__init__(settings)
        self.path = path
        self._fs = fs
        self.fsync = fsync
        #: told (under ``_lock``) the first time the log changes after a sync, so that the owner's
        #: sync visits only changed logs
        self._on_change = on_change
        self._changed = False
        self._lock = threading.Lock()  # buffers and the segment list
        self._sync_lock = threading.Lock()
        self._segs: list[Segment] = []
        self._firsts: list[int] = []  # parallel to _segs, for bisect
        self._chunk_open = False
        self._dir_dirty = False
        self._failed: str | None = None
        self._hints: dict[int, tuple[Segment, int]] = {}
        #: producers' names encoded, for their records
        self._names: dict[str, bytes] = {}
        # a stream's records share their route: encoded from a template, read back from it
        self._encoder = MessageEncoder()
        self._decoder = MessageDecoder()
        fs.makedirs(path, exist_ok=True)
        self._open()

    # -- I/O primitives (through the file-system seam; fault-injection tests also override these)
    def _pwrite(self, fd: int, data: bytearray, offset: int) -> int:
        return self._fs.pwrite(fd, data, offset)

    def _fsync(self, fd: int) -> None:
        self._fs.fsync(fd)

    # -- opening ----------------------------------------------------------------------------------------
    def _open(self) -> None:
        fs = self._fs
        names = sorted(n for n in fs.listdir(self.path) if n.endswith(".seg") and n[:-4].isdigit())
        for n in fs.listdir(self.path):  # sidecars of deleted segments, half-written ones
            if n.endswith(".tmp") or (n.endswith(".idx") and n[:-4] + ".seg" not in names):
                fs.unlink(os.path.join(self.path, n))
        state: tuple[dict[str, int], dict[str, int]] | None = None
        for i, name in enumerate(names):
            path = os.path.join(self.path, name)
            first = int(name[:-4])
            if self._segs and first != self._segs[-1].end:
                self._discard(names[i:], "does not continue the previous segment")
                break
            seg = Segment(path, fs.open(path, os.O_RDWR), first, 0)
            state = None
            if i < len(names) - 1 and seg.load_index(fs, self.chunk_filters):
                end, torn = seg.written, False
            else:
                state = ({}, {})
                end, torn = self._scan(seg, state, self.chunk_filters)
            if end <= len(MAGIC):  # nothing valid (a segment started just before a crash)
                fs.close(seg.fd)
                fs.unlink(path)
                self._dir_dirty = True
                self._discard(names[i + 1:], "follows an empty segment")
                break
            self._segs.append(seg)
            if torn:
                fs.ftruncate(seg.fd, end)
                self._discard(names[i + 1:], "follows a torn segment")
                break
        if self._segs:
            last = self._segs[-1]
            if state is None or last.sidecar:  # its tracking state comes from a scan
                state = ({}, {})
                self._scan(Segment(last.path, last.fd, last.first, 0), state)
            if last.sidecar:  # it is appended to again
                fs.unlink(last.idx_path)
                last.sidecar = False
            self._consumers, self._producers = dict(state[0]), dict(state[1])
        self._firsts = [s.first for s in self._segs]
        for seg in self._segs:
            seg.synced = seg.written  # as durable as it was found
        if self._segs:
            self.first = self._segs[0].first
            self.tail = self.committed = self._segs[-1].end
            self.last_chunk = max((s.chunk for s in self._segs), default=-1)
            self.chunk_filters.end = self.tail
            self._last_ts = max(0, max(s.last_ts for s in self._segs))
        if self.dropped_on_recovery:
            log.warning("stream %s: dropped %d torn or unconfirmed records", self.path, self.dropped_on_recovery)

    def _discard(self, names: list[str], why: str) -> None:
        """Delete segments after a torn one (never confirmed), counting their records."""
        for name in names:
            path = os.path.join(self.path, name)
            seg = Segment(path, self._fs.open(path, os.O_RDONLY), int(name[:-4]), 0)
            self._scan(seg, ({}, {}))
            self.dropped_on_recovery += seg.end - seg.first
            self._fs.close(seg.fd)
            log.warning("stream segment %s %s: deleted", path, why)
            self._fs.unlink(path)
            self._dir_dirty = True

    def _scan(self, seg: Segment, state: tuple[dict[str, int], dict[str, int]],
              chunks: ChunkFilters | None = None) -> tuple[int, bool]:
        """Validate ``seg``'s records, building its index (and its chunk filters into ``chunks``)
        and replaying tracking into ``state``. Returns the end of the valid data and whether a torn
        tail follows it."""
        size = self._fs.fsize(seg.fd)
        if size < len(MAGIC):
            return 0, size > 0
        with self._fs.mapped(seg.fd) as data:
            if data[: len(MAGIC)] != MAGIC:
                raise StoreError(f"{seg.path} is not a sansmq stream segment")
            view = memoryview(data)
            try:
                pos, end = len(MAGIC), len(data)
                rec, head = _REC.size, HEAD.size
                while pos + rec <= end:
                    n, crc = _REC.unpack_from(view, pos)
                    stop = pos + rec + n
                    if n < head or stop > end or crc32(view[pos + rec:stop]) != crc:
                        break
                    p = view[pos + rec:stop]
                    offset, ts, kind = HEAD.unpack_from(p, 0)
                    k = kind & KIND
                    if k == K_MSG:
                        if offset != seg.end:
                            break  # not the expected offset: treat as torn
                        seg.index(offset, pos, ts)
                        seg.end = offset + 1
                        seg.last_ts = ts
                        if kind & F_CHUNK:
                            seg.chunk = offset
                        o = head
                        if kind & F_PRODUCER:
                            pid, ln = PROD.unpack_from(p, head)
                            o = head + PROD.size
                            state[1][str(p[o:o + ln], "utf-8", "surrogateescape")] = pid
                            o += ln
                        if chunks is not None:
                            value = None
                            if kind & F_FILTER:
                                ln = U32.unpack_from(p, o)[0]
                                value = str(p[o + 4:o + 4 + ln], "utf-8", "surrogateescape") or None
                            chunks.add_value(offset, bool(kind & F_CHUNK), value, known=bool(kind & F_FILTER),
                                             segment_start=offset == seg.first)
                    elif k == K_TRACK:
                        state[0][str(p[head:], "utf-8", "surrogateescape")] = offset
                    elif k == K_SNAP:
                        try:
                            consumers, producers = unpack_snapshot(p)
                        except (ValueError, struct.error):
                            break
                        state[0].clear()
                        state[0].update(consumers)
                        state[1].clear()
                        state[1].update(producers)
                    pos = stop
                p = view = None  # type: ignore[assignment]  # release the mapping's exports
            except BaseException:
                view = p = None  # type: ignore[assignment]
                raise
        seg.written = pos
        if pos < size:
            self.dropped_on_recovery += 1
        return pos, pos < size

    # -- appending (loop thread) ------------------------------------------------------------------------
    def _new_segment(self, first: int, ts: int) -> Segment:
        """Start a segment whose first record is the tracking snapshot (caller holds ``_lock``)."""
        path = os.path.join(self.path, segment_name(first))
        fd = self._fs.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg = Segment(path, fd, first, 0)
        snap = SNAP.pack(len(self._consumers), len(self._producers))
        seg.buf += MAGIC
        seg.buf += _record(HEAD.pack(first, ts, K_SNAP) + snap + pack_names(self._consumers)
                           + pack_names(self._producers))
        self._segs.append(seg)
        self._firsts.append(first)
        self._dir_dirty = True
        return seg

    def _check_writable(self) -> None:
        """While a write-out fails new records are refused (a retry here may clear it); caller
        holds ``_lock``."""
        if self._failed is not None:
            self._write_out()

    def _write_out(self) -> None:
        """Write every buffer out, or raise StoreError (caller holds ``_lock``)."""
        try:
            self._write_all()
        except OSError as exc:
            self._mark_failed(exc)
            raise StoreError(f"stream store cannot write ({self._failed})") from None
        self._failed = None

    def _mark_failed(self, exc: OSError) -> None:
        if self._failed is None:
            log.error("stream %s: write failed, refusing appends until a retry succeeds: %s", self.path, exc)
        self._failed = f"{errno.errorcode.get(exc.errno or 0, 'EIO')}: {exc.strerror or exc}"

    def _changes(self) -> None:
        """Note that the next sync has work here (caller holds ``_lock``)."""
        if not self._changed:
            self._changed = True
            if self._on_change is not None:
                self._on_change(self)

    def _put(self, seg: Segment, rec: bytes) -> None:
        self._changes()
        seg.buf += rec
        if len(seg.buf) >= FLUSH_AT:
            try:
                self._write(seg)
            except OSError as exc:
                self._mark_failed(exc)

    def _append(self, offset: int, ts: int, msg: Message, producer: str | None,
                publishing_id: int | None) -> tuple[bool, bool]:
        body = self._encoder.encode(msg)
        kind = K_MSG | RECORD_FLAGS
        if producer is not None:
            name = self._names.get(producer)
            if name is None:
                name = self._name(producer)
            prod = PROD.pack(publishing_id, len(name)) + name
            kind |= F_PRODUCER
        else:
            prod = b""
        value = filter_value(msg)
        field = NO_FILTER if value is None else filter_field(value)
        head = HEAD.size + len(prod) + len(field)
        size = _REC.size + head + len(body)
        with self._lock:
            if self._failed is not None:
                self._check_writable()
            rolled = False
            segs = self._segs
            if not segs:
                seg = self._new_segment(offset, ts)
            else:
                seg = segs[-1]
                if seg.end > seg.first and seg.written + len(seg.buf) + size > self.settings.segment_bytes:
                    seg = self._new_segment(offset, ts)
                    rolled = True
            chunk_start = not self._chunk_open or rolled
            if chunk_start:
                kind |= F_CHUNK
                seg.chunk = offset
            self._chunk_open = True
            self.chunk_filters.add_value(offset, chunk_start, value, segment_start=seg.first == offset)
            buf = seg.buf
            pos = seg.written + len(buf)
            idx = seg.idx_off
            if not idx or offset - idx[-1] >= INDEX_STRIDE or pos - seg.idx_pos[-1] >= INDEX_BYTES:
                seg.index(offset, pos, ts)
            if not self._changed:
                self._changes()
            # the record (``_record``) written in pieces: its CRC covers the payload's parts in turn
            first = HEAD.pack(offset, ts, kind) + prod + field
            buf += _REC.pack(head + len(body), crc32(body, crc32(first)))
            buf += first
            buf += body
            if len(buf) >= FLUSH_AT:
                try:
                    self._write(seg)
                except OSError as exc:
                    self._mark_failed(exc)
            seg.end = offset + 1
            seg.last_ts = ts
        return chunk_start, rolled

    def _name(self, producer: str) -> bytes:
        """``producer``'s name as the record holds it (kept for the producer's next appends)."""
        if len(self._names) >= HINTS:
            self._names.clear()
        name = self._names[producer] = producer.encode("utf-8", "surrogateescape")
        return name

    def _track(self, consumer: str, offset: int, ts: int) -> None:
        rec = _record(HEAD.pack(offset, ts, K_TRACK) + consumer.encode("utf-8", "surrogateescape"))
        with self._lock:
            self._check_writable()
            seg = self._segs[-1] if self._segs else self._new_segment(self.tail, ts)
            self._put(seg, rec)

    # -- reading (loop thread) ----------------------------------------------------------------------------
    def _read_at(self, seg: Segment, pos: int, n: int) -> bytes:
        """``n`` bytes (fewer at the end) at ``pos``, from the file and/or the unwritten buffer."""
        with self._lock:
            if pos + n <= seg.written:
                return self._fs.pread(seg.fd, n, pos)
            head = self._fs.pread(seg.fd, seg.written - pos, pos) if pos < seg.written else b""
            start = max(0, pos - seg.written)
            return head + bytes(seg.buf[start:start + n - len(head)])

    def _records(self, seg: Segment, pos: int) -> Iterator[tuple[int, memoryview]]:
        """(position, payload) of ``seg``'s records from ``pos`` on, read in blocks."""
        rec = _REC.size
        while True:
            block = self._read_at(seg, pos, READ_BLOCK)
            view = memoryview(block)
            o = 0
            while o + rec <= len(view):
                n, crc = _REC.unpack_from(view, o)
                stop = o + rec + n
                if stop > len(view):
                    if o == 0:  # one record larger than a block
                        block = self._read_at(seg, pos, rec + n)
                        if len(block) < rec + n:
                            return
                        view = memoryview(block)
                        continue
                    break
                p = view[o + rec:stop]
                if crc32(p) != crc:
                    raise StoreError(f"stream segment {seg.path}: record at {pos + o} is corrupt")
                yield pos + o, p
                o = stop
            if o == 0:
                return
            pos += o

    def _seek(self, seg: Segment, offset: int) -> int:
        hint = self._hints.get(offset)
        if hint is not None and hint[0] is seg:
            return hint[1]
        i = bisect_right(seg.idx_off, offset) - 1
        return seg.idx_pos[i] if i >= 0 else len(MAGIC)

    def _read(self, offset: int, max_count: int, max_bytes: int, upto: int | None,
              raw: bool) -> list[StreamRecord] | list[RawRecord]:
        """``read`` (decoded messages) or ``read_raw`` (their stored bytes, nothing decoded)."""
        offset, end = self._bounds(offset, upto)
        out: list = []
        nbytes = 0
        decode = self._decoder.decode
        while offset < end and len(out) < max_count:
            seg = self._segs[bisect_right(self._firsts, offset) - 1]
            stop_pos = None
            after = 0  # the position after the last record seen
            for pos, p in self._records(seg, self._seek(seg, offset)):
                after = pos + _REC.size + len(p)
                o, ts, kind = HEAD.unpack_from(p, 0)
                if kind & KIND != K_MSG or o < offset:
                    continue
                if o >= end or len(out) >= max_count:
                    stop_pos = pos
                    break
                at = HEAD.size
                if kind & F_PRODUCER:
                    at += PROD.size + PROD.unpack_from(p, HEAD.size)[1]
                if kind & F_FILTER:
                    at += U32.size + U32.unpack_from(p, at)[0]
                if raw:  # the message's bytes (a bound on its body's: headers are few)
                    item: Any = (o, ts, p[at:])
                    size = len(p) - at
                else:
                    msg = decode(p[at:])
                    item = _new_record((o, ts, msg))
                    size = len(msg.body)
                if out and nbytes + size > max_bytes:
                    stop_pos = pos
                    break
                out.append(item)
                nbytes += size
                offset = o + 1
            if stop_pos is not None:
                self._hint(offset, seg, stop_pos)
                break
            if offset < end and offset < seg.end:
                raise StoreError(f"stream {self.path}: offset {offset} missing from its segment")
            if offset == self.tail and after:  # a consumer at the end resumes here, without a seek
                self._hint(offset, seg, after)
        return out

    def _hint(self, offset: int, seg: Segment, pos: int) -> None:
        if len(self._hints) >= HINTS:
            del self._hints[next(iter(self._hints))]
        self._hints[offset] = (seg, pos)

    def offset_at(self, ts_ms: int) -> int:
        for seg in self._segs:
            if seg.end > max(seg.first, self.first) and seg.last_ts >= ts_ms:
                break
        else:
            return self.tail
        i = max(0, bisect_right(seg.idx_ts, ts_ms - 1) - 1)  # the last entry before ts_ms
        for _, p in self._records(seg, seg.idx_pos[i]):
            o, ts, kind = HEAD.unpack_from(p, 0)
            if kind & KIND == K_MSG and ts >= ts_ms:
                return max(o, self.first)
        return self.tail

    def _end_within_bytes(self, start: int, end: int, budget: int) -> int:
        """Bytes are the span of file the records fill (their framing, producer and filter fields,
        and any offset-tracking records stored among them): whole segments count their size, the
        segment the budget ends in is cut with its sparse index and a scan of at most one stride."""
        i = bisect_right(self._firsts, start) - 1
        seg = self._segs[i]
        pos = self._position(seg, start)
        left = budget
        while seg.end <= end and seg.size - pos <= left:  # all of it fits
            if seg.end == end or i + 1 == len(self._segs) or not self._segs[i + 1].idx_pos:
                return seg.end
            left -= seg.size - pos
            i += 1
            seg = self._segs[i]
            start, pos = seg.first, seg.idx_pos[0]
        return self._fitting(seg, start, pos + left, end)

    def _position(self, seg: Segment, offset: int) -> int:
        """Where the record of ``offset`` (a message in ``seg``) starts in the file."""
        for pos, p in self._records(seg, seg.idx_pos[bisect_right(seg.idx_off, offset) - 1]):
            o, _, kind = HEAD.unpack_from(p, 0)
            if kind & KIND == K_MSG and o >= offset:
                return pos
        raise StoreError(f"stream {self.path}: offset {offset} missing from its segment")

    def _fitting(self, seg: Segment, start: int, limit: int, end: int) -> int:
        """The end of the records of ``seg`` from ``start`` below ``end`` that end at or before file
        position ``limit``. Records before an index entry at or below ``limit`` (and ``end``) fit
        without reading them; only the stride after that entry is scanned."""
        lo = bisect_right(seg.idx_off, start) - 1
        j = max(lo, min(bisect_right(seg.idx_pos, limit), bisect_right(seg.idx_off, end)) - 1)
        fit = max(start, seg.idx_off[j])
        for pos, p in self._records(seg, seg.idx_pos[j]):
            o, _, kind = HEAD.unpack_from(p, 0)
            if kind & KIND != K_MSG or o < fit:
                continue
            if o >= end or pos + _REC.size + len(p) > limit:
                break
            fit = o + 1
        return fit

    # -- retention (loop thread) ------------------------------------------------------------------------
    def _segment_stats(self) -> list[SegmentStats]:
        return [SegmentStats(s.size, s.last_ts) for s in self._segs]

    def _drop_segments(self, n: int) -> int:
        with self._lock:
            gone, self._segs = self._segs[:n], self._segs[n:]
            self._firsts = self._firsts[n:]
            self.chunk_filters.drop_below(self._segs[0].first)  # under the lock: sidecars read them
            for seg in gone:
                self._fs.close(seg.fd)
                seg.fd = -1
                for path in (seg.path, seg.idx_path):
                    try:
                        self._fs.unlink(path)
                    except FileNotFoundError:
                        pass
            self._dir_dirty = True
            self._changes()
        self._hints = {k: v for k, v in self._hints.items() if v[0] not in gone}
        return self._segs[0].first

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segs)

    # -- write-out and sync ---------------------------------------------------------------------------------
    def _write(self, seg: Segment) -> None:
        """pwrite the buffer at its offset (caller holds _lock)."""
        write_out(seg, self._pwrite)

    def _write_all(self) -> None:
        for seg in self._segs:
            self._write(seg)

    def sync(self) -> None:
        with self._sync_lock:
            with self._lock:
                self._changed = False  # a change from here on registers for the next sync
                self._write_out()
                for seg in self._segs:
                    if seg.rewrite:  # a failed fsync may have left its pages unwritten
                        try:
                            rewrite_unsynced(seg, self._fs.pread, self._pwrite)
                        except OSError as exc:
                            self._mark_failed(exc)
                            raise StoreError(f"stream store cannot write ({self._failed})") from None
                self._chunk_open = False
                tail = self.tail
                dirty = [s for s in self._segs if s.dirty]
                marks = [s.written for s in dirty]
                fds = []
                for seg in dirty:
                    seg.dirty = False
                    if self.fsync:  # without fsync, written is as durable as it gets
                        fds.append(self._fs.dup(seg.fd))
                dir_dirty = self._dir_dirty and self.fsync
                self._dir_dirty = False
            try:
                for fd in fds:
                    self._fsync(fd)
                if dir_dirty:
                    fd = self._fs.open(self.path, os.O_RDONLY)
                    try:
                        self._fsync(fd)
                    finally:
                        self._fs.close(fd)
            except OSError as exc:
                with self._lock:  # never report success for pages the kernel may have dropped
                    for seg in dirty:
                        seg.dirty = seg.rewrite = True
                    self._dir_dirty = self._dir_dirty or dir_dirty
                    self._mark_failed(exc)
                raise StoreError(f"stream store cannot sync ({self._failed})") from None
            finally:
                for fd in fds:
                    self._fs.close(fd)
            if self.fsync:
                for seg, mark in zip(dirty, marks, strict=True):
                    seg.synced = max(seg.synced, mark)
            self.committed = max(self.committed, tail)
            self._save_indexes()

    def _save_indexes(self) -> None:
        """Write the sidecar of every sealed segment that is fully fsynced (worker thread)."""
        with self._lock:
            sealed = [s for s in self._segs[:-1] if not s.sidecar and not s.dirty and not s.buf]
        for seg in sealed:
            tmp = seg.idx_path + ".tmp"
            try:
                with self._lock:
                    image = seg.save_index(self.chunk_filters)
                self._fs.write_file(tmp, image)
                with self._lock:
                    if seg.fd >= 0 and seg in self._segs:
                        self._fs.replace(tmp, seg.idx_path)
                        seg.sidecar = True
                    else:
                        self._fs.unlink(tmp)
            except OSError as exc:  # only costs a scan on the next open
                log.warning("stream %s: could not save a segment index: %s", self.path, exc)

    def close(self) -> None:
        try:
            self.sync()
        except StoreError as exc:
            log.error("closing stream %s: %s", self.path, exc)
        with self._lock:
            for seg in self._segs:
                self._fs.close(seg.fd)
            self._segs = []
            self._firsts = []
