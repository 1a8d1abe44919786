"""The compact per-queue index of the segment store: parallel ``array('Q')`` of message ids and
packed positions (``segment << 32 | offset``, 0 = removed) plus sparse delivery counts and
per-queue expiries; and a queue's page: the ready messages the broker keeps out of memory."""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator

from ...store import QueueDef


class _QIndex:
    """One durable queue: the compact index of its persistent messages, and its definition when it
    is not a plain one (durable, no auto-delete, no arguments: ``qdef`` None, the store knows its
    vhost and name). An idle plain queue has no _QIndex at all (see ``SegmentStore._qs``)."""

    __slots__ = ("qid", "qdef", "ids", "pos", "live", "counts", "exp")

    def __init__(self, qid: int, qdef: QueueDef | None = None) -> None:
        self.qid = qid
        self.qdef = qdef
        self.ids: array[int] | None = None
        self.pos: array[int] | None = None
        self.live = 0
        self.counts: dict[int, int] | None = None
        #: message id -> this queue's expiry of it (x-message-ttl), when it has one
        self.exp: dict[int, float] | None = None

    def add(self, msg_id: int, pos: int) -> None:
        if self.ids is None or self.pos is None:
            self.ids, self.pos = array("Q", (msg_id,)), array("Q", (pos,))
        elif not self.ids or self.ids[-1] < msg_id:
            self.ids.append(msg_id)
            self.pos.append(pos)
        else:  # not expected (ids grow with enqueue order); keep the arrays sorted anyway
            i = bisect.bisect_left(self.ids, msg_id)
            if i < len(self.ids) and self.ids[i] == msg_id:
                return
            self.ids.insert(i, msg_id)
            self.pos.insert(i, pos)
        self.live += 1

    def find(self, msg_id: int) -> int:
        ids = self.ids
        if not ids:
            return -1
        i = bisect.bisect_left(ids, msg_id)
        if i < len(ids) and ids[i] == msg_id and self.pos[i]:  # type: ignore[index]
            return i
        return -1

    def take(self, i: int) -> int:
        """Remove slot ``i``; returns its position. Compacts once half the slots are dead."""
        assert self.ids is not None and self.pos is not None
        p = self.pos[i]
        self.pos[i] = 0
        self.live -= 1
        if self.counts is not None:
            self.counts.pop(self.ids[i], None)
            if not self.counts:
                self.counts = None
        if self.exp is not None:
            self.exp.pop(self.ids[i], None)
            if not self.exp:
                self.exp = None
        if not self.live:
            self.ids = self.pos = None
        elif self.live * 2 < len(self.ids) and len(self.ids) > 32:
            ids, pos = self.ids, self.pos
            self.ids = array("Q", (m for m, q in zip(ids, pos, strict=False) if q))
            self.pos = array("Q", (q for q in pos if q))
        return p

    def entries(self) -> Iterator[tuple[int, int]]:
        """Live (message id, position) pairs, lazily (a list of a big queue's pairs costs ~100 B each)."""
        if not self.ids or not self.pos:
            return iter(())
        return ((m, q) for m, q in zip(self.ids, self.pos, strict=False) if q)


#: a page slot with this bit holds ``TRANSIENT | position`` of a record only the page refers to;
#: without it, the id of a persistent message the queue's ``_QIndex`` holds, or with ``RUN`` a run
#: of consecutive such ids (``RUN | first << 22 | length``): one slot for a whole burst
TRANSIENT = 1 << 63
RUN = 1 << 62
_LEN = (1 << 22) - 1
_ID = (1 << 40) - 1


class _Page:
    """A queue's paged ready messages, in order: u64 slots (see ``TRANSIENT``/``RUN``) consumed from
    ``head`` (``off`` messages into a run); delivery counts and per-queue expiries of transient ones,
    sparse, keyed by absolute slot number (``base`` + index)."""

    __slots__ = ("ent", "head", "off", "base", "extra")

    def __init__(self) -> None:
        self.ent = array("Q")
        self.head = 0
        self.off = 0
        self.base = 0
        self.extra: dict[int, tuple[int, float | None]] | None = None

    def __len__(self) -> int:
        """Slots left (0 = empty)."""
        return len(self.ent) - self.head

    def add_stored(self, mid: int) -> None:
        ent = self.ent
        if len(ent) > self.head and mid <= _ID:
            last = ent[-1]
            if last & RUN and not last & TRANSIENT:
                if ((last >> 22) & _ID) + (last & _LEN) == mid and last & _LEN < _LEN:
                    ent[-1] = last + 1
                    return
            elif not last & TRANSIENT and last + 1 == mid and (len(ent) - 1 > self.head or not self.off):
                ent[-1] = RUN | (last << 22) | 2
                return
        ent.append(mid)

    def add_range(self, first: int, count: int) -> None:
        """``count`` consecutive stored ids from ``first`` (recovery of a backlog)."""
        while count:
            if first + count - 1 > _ID:  # ids past what a run can hold: one slot each
                self.add_stored(first)
                first, count = first + 1, count - 1
                continue
            n = min(count, _LEN)
            if n == 1:
                self.add_stored(first)
            else:
                self.ent.append(RUN | (first << 22) | n)
            first, count = first + n, count - n

    def add_transient(self, pos: int) -> int:
        """Appends ``TRANSIENT | pos``; returns its absolute slot number."""
        self.ent.append(TRANSIENT | pos)
        return self.base + len(self.ent) - 1

    def items(self, n: int, consume: bool) -> list[tuple[int, int]]:
        """The next ``n`` messages as (absolute slot, ``TRANSIENT | pos`` or message id)."""
        out: list[tuple[int, int]] = []
        ent, j, off, end, base = self.ent, self.head, self.off, len(self.ent), self.base
        while j < end and len(out) < n:
            e = ent[j]
            if e & RUN and not e & TRANSIENT:
                first, length = (e >> 22) & _ID, e & _LEN
                take = min(length - off, n - len(out))
                slot = base + j
                out.extend((slot, first + k) for k in range(off, off + take))
                off += take
                if off == length:
                    j += 1
                    off = 0
            else:
                out.append((base + j, e))
                j += 1
        if consume:
            self.head, self.off = j, off
            if self.head > 4096 and self.head * 2 > len(ent):  # drop the consumed prefix
                del ent[: self.head]
                self.base += self.head
                self.head = 0
        return out
