"""Paging of a SegmentStore: ready messages beyond a queue's in-memory window kept as one u64 per
message, read back from the segments in runs (``Store.page_out`` / ``page_in``).
"""

from __future__ import annotations

import logging
import struct
from zlib import crc32

from ..._message import Message
from ...records import _REC, _decode_message
from ...store import PagedMessage
from ._files import _File
from ._index import TRANSIENT, _Page
from ._parts import StoreParts

log = logging.getLogger("sansmq.store")


#: page-in reads records at most this far apart with one pread
READ_SPAN = 256 << 10


class Paging(StoreParts):
    """The paging methods and the record reads they share with recovery (a mixin of ``SegmentStore``)."""

    def page_out(self, vhost: str, queue: str, msg: Message, count: int, expires: float | None,
                 stored: bool) -> None:
        key = (vhost, queue)
        page = self._pages.get(key)
        if page is None:
            page = self._pages[key] = _Page()
        if stored:
            qi = self._qget(*key)
            if qi is not None and msg.id in qi:  # already a record + index entry: just its id
                page.add_stored(msg.id)
                return
        # a transient record: never journalled, so never recovered; fsynced only along with others
        with self._lock:
            pos = self._append_message(msg)
        self._refs[pos >> 32] = self._refs.get(pos >> 32, 0) + 1
        slot = page.add_transient(pos)
        if count or expires != msg.expires_at:
            if page.extra is None:
                page.extra = {}
            page.extra[slot] = (count, expires)

    def _page_read(self, key: tuple[str, str], page: _Page, slot: int, e: int, take: bool) -> PagedMessage | None:
        """Page item ``e`` (at absolute ``slot``) read back; ``take``: it leaves the page (a transient
        record loses its reference; an unreadable stored one is removed from the queue for good)."""
        if e & TRANSIENT:
            pos = e & ~TRANSIENT
            extra = page.extra.get(slot) if page.extra else None
            msg = self._read_message(pos)
            if take:
                if extra is not None:
                    del page.extra[slot]  # type: ignore[union-attr]
                self._unref(pos >> 32)
            if msg is None:
                return None
            count, expires = extra if extra is not None else (0, msg.expires_at)
            return msg, count, expires
        qi = self._qget(*key)
        pos = qi.get(e) if qi is not None else 0
        if not pos:
            return None
        assert qi is not None
        msg = self._read_message(pos)
        if msg is None or msg.id != e:
            if take:
                self.remove(key[0], key[1], e)
            return None
        return msg, (qi.counts or {}).get(e, 0), (qi.exp or {}).get(e, msg.expires_at)

    def page_in(self, vhost: str, queue: str, n: int) -> tuple[list[PagedMessage], int]:
        key = (vhost, queue)
        page = self._pages.get(key)
        if page is None:
            return [], 0
        out: list[PagedMessage] = []
        items = page.items(n, True)
        qi = self._qget(*key)
        positions = []
        for _, e in items:
            if e & TRANSIENT:
                positions.append(e & ~TRANSIENT)
            else:
                positions.append(qi.get(e) if qi is not None else 0)
        payloads = self._read_records(positions)  # one pread per run of nearby records
        extra = page.extra
        for (slot, e), pos, p in zip(items, positions, payloads, strict=False):
            msg = None
            if p is not None:
                try:
                    msg = _decode_message(p)
                except (ValueError, IndexError, struct.error):
                    msg = None
            if e & TRANSIENT:
                more = extra.pop(slot, None) if extra else None
                self._unref(pos >> 32)  # the message lives in memory from now on
                if msg is None:
                    self.dropped_paged += 1
                    continue
                count, expires = more if more is not None else (0, msg.expires_at)
                out.append((msg, count, expires))
            elif pos:
                if msg is None or msg.id != e:
                    self.dropped_paged += 1
                    self.remove(vhost, queue, e)  # unreadable: gone for good
                    continue
                assert qi is not None
                out.append((msg, (qi.counts or {}).get(e, 0), (qi.exp or {}).get(e, msg.expires_at)))
        if extra is not None and not extra:
            page.extra = None
        if not len(page):
            del self._pages[key]
        if len(out) < len(items):
            log.warning("queue %r: %d paged message(s) could not be read back", queue, len(items) - len(out))
        return out, len(items)

    def page_drop(self, vhost: str, queue: str, forget_stored: bool) -> None:
        page = self._pages.pop((vhost, queue), None)
        if page is None:
            return
        while items := page.items(1 << 16, True):
            for _, e in items:
                if e & TRANSIENT:
                    self._unref((e & ~TRANSIENT) >> 32)
                elif forget_stored:
                    self.remove(vhost, queue, e)

    def paged(self, vhost: str, queue: str) -> list[PagedMessage]:
        key = (vhost, queue)
        page = self._pages.get(key)
        if page is None:
            return []
        out = []
        for slot, e in page.items(1 << 62, False):
            got = self._page_read(key, page, slot, e, False)
            if got is not None:
                out.append(got)
        return out

    def _read_at(self, f: _File, off: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``off`` of ``f``, from the file and/or its unwritten buffer (caller
        holds ``_lock``)."""
        w = f.written
        if off + n <= w:
            return self._fs.pread(f.fd, n, off)
        if off >= w:
            return bytes(f.buf[off - w : off - w + n])
        return self._fs.pread(f.fd, w - off, off) + bytes(f.buf[: off + n - w])

    def _read_record(self, pos: int) -> bytes | None:
        """The payload of the record at ``pos`` if it is complete and its CRC matches."""
        return self._read_records([pos])[0]

    def _read_records(self, positions: list[int]) -> list[bytes | None]:
        """Payloads of the records at ``positions`` (None: missing, torn or CRC mismatch). Runs of
        ascending positions less than ``READ_SPAN`` apart in one segment are read with one pread."""
        out: list[bytes | None] = [None] * len(positions)
        rec_size = _REC.size
        i, total = 0, len(positions)
        with self._lock:
            while i < total:
                pos = positions[i]
                f = self._segs.get(pos >> 32) if pos else None
                if f is None:
                    i += 1
                    continue
                seg, start = pos >> 32, pos & 0xFFFFFFFF
                j, last = i + 1, start
                while j < total:
                    nxt = positions[j]
                    off = nxt & 0xFFFFFFFF
                    if nxt >> 32 != seg or off < last or off - start > READ_SPAN:
                        break
                    last = off
                    j += 1
                block = self._read_at(f, start, last - start + 512)
                for k in range(i, j):
                    o = (positions[k] & 0xFFFFFFFF) - start
                    if o + rec_size > len(block):
                        head = self._read_at(f, start + o, rec_size)
                        if len(head) < rec_size:
                            continue
                        n, crc = _REC.unpack_from(head, 0)
                        payload = self._read_at(f, start + o + rec_size, n)
                    else:
                        n, crc = _REC.unpack_from(block, o)
                        payload = block[o + rec_size : o + rec_size + n]
                        if len(payload) < n:  # a record longer than the block holds
                            payload = self._read_at(f, start + o + rec_size, n)
                    if len(payload) == n and crc32(payload) == crc:
                        out[k] = payload
                i = j
        return out

    def _read_message(self, pos: int) -> Message | None:
        p = self._read_record(pos)
        if p is None:
            return None
        try:
            return _decode_message(p)
        except (ValueError, IndexError, struct.error):
            return None
