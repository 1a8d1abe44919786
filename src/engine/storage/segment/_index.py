"""The compact per-queue index of the segment store: blocks of message ids and packed positions
(``segment << 32 | offset``, 0 = removed), most of them packed to a few bytes (``_blocks``), plus
sparse delivery counts and per-queue expiries; and a queue's page: the ready messages the broker
keeps out of memory."""

from __future__ import annotations

import bisect
import operator
from array import array
from collections import Counter
from collections.abc import Iterator
from itertools import repeat

from ...store import QueueDef
from ._blocks import BLOCK, WARM, _Block


class _QIndex:
    """One durable queue: the compact index of its persistent messages, and its definition when it
    is not a plain one (durable, no auto-delete, no arguments: ``qdef`` None, the store knows its
    vhost and name). An idle plain queue has no _QIndex at all (see ``SegmentStore._qs``).

    The entries are in blocks of up to ``BLOCK`` (see ``_blocks``), ``firsts`` the first id of each
    (a bisect finds an id's block); the last block is open (``tail``, appended to), the sealed ones
    packed but for the ``WARM`` in ``warm`` (least recently used first)."""

    __slots__ = ("qid", "qdef", "blocks", "firsts", "tail", "warm", "top_id", "live", "counts", "exp")

    def __init__(self, qid: int, qdef: QueueDef | None = None) -> None:
        self.qid = qid
        self.qdef = qdef
        self.blocks: list[_Block] | None = None  # None: no entries (an idle queue holds no arrays)
        self.firsts: array[int] | None = None
        self.tail: _Block | None = None
        self.warm: list[_Block] | None = None
        self.top_id = 0  # the largest id of a sealed or emptied open block (``top``)
        self.live = 0
        self.counts: dict[int, int] | None = None
        #: message id -> this queue's expiry of it (x-message-ttl), when it has one
        self.exp: dict[int, float] | None = None

    def add(self, msg_id: int, pos: int) -> None:
        b = self.tail
        if b is not None:  # the common case: a new id appended to the open block
            ids = b.ids
            assert ids is not None
            if len(ids) < BLOCK and msg_id > ids[-1]:
                ids.append(msg_id)
                b.pos.append(pos)  # type: ignore[union-attr]
                self.live += 1
                return
        self._add(msg_id, pos)

    def _add(self, msg_id: int, pos: int) -> None:
        """``add`` when there is no open block, it is full, or ``msg_id`` is not the largest."""
        blocks, firsts = self.blocks, self.firsts
        if blocks is None or firsts is None:
            self.tail = _Block(array("Q", (msg_id,)), array("Q", (pos,)))
            self.blocks, self.firsts = [self.tail], array("Q", (msg_id,))
        elif msg_id > self.top():
            if self.tail is not None:
                self._seal(self.tail)
            self.tail = _Block(array("Q", (msg_id,)), array("Q", (pos,)))
            blocks.append(self.tail)
            firsts.append(msg_id)
        else:  # not expected (ids grow with enqueue order); keep the blocks sorted anyway
            k = max(0, bisect.bisect_right(firsts, msg_id) - 1)
            b = blocks[k]
            ids, poss = self._arrays(b)
            i = bisect.bisect_left(ids, msg_id)
            if i < len(ids) and ids[i] == msg_id:
                if poss[i]:
                    return
                poss[i] = pos
                b.dead -= 1
            else:
                ids.insert(i, msg_id)
                poss.insert(i, pos)
            firsts[k] = min(firsts[k], msg_id)
            b.dirty = True
        self.live += 1

    def top(self) -> int:
        """The largest id added (live or not), without unpacking a block."""
        t = self.tail
        return t.ids[-1] if t is not None and t.ids else self.top_id

    def _seal(self, b: _Block) -> None:
        """The open block is full: packed now, unless consumers are acking in it already."""
        b.sealed = True
        self.tail = None
        self.top_id = max(self.top_id, b.ids[-1])  # type: ignore[index]
        if b.dead:
            self._warm_up(b)
        else:
            b.pack()

    def _warm_up(self, b: _Block) -> None:
        """``b`` becomes the most recently used unpacked sealed block (the least recent is packed)."""
        warm = self.warm
        if warm is None:
            warm = self.warm = []
        elif b in warm:
            warm.remove(b)
        warm.append(b)
        if len(warm) > WARM:
            warm.pop(0).pack()

    def _arrays(self, b: _Block) -> tuple[array[int], array[int]]:
        """Block ``b``'s arrays, unpacking it if need be."""
        if not b.sealed or (self.warm and self.warm[-1] is b):
            assert b.ids is not None and b.pos is not None
            return b.ids, b.pos  # the open block, or the sealed one in use
        arrays = b.thaw()
        self._warm_up(b)
        return arrays

    def _slot(self, msg_id: int) -> tuple[int, int]:
        """(block, slot) of live entry ``msg_id``, or (-1, -1)."""
        firsts = self.firsts
        if not firsts or self.blocks is None:
            return -1, -1
        k = bisect.bisect_right(firsts, msg_id) - 1
        if k < 0:
            return -1, -1
        b = self.blocks[k]
        ids, pos = b.ids, b.pos
        if ids is None or pos is None or (b.sealed and self.warm and self.warm[-1] is not b):
            ids, pos = self._arrays(b)
        i = bisect.bisect_left(ids, msg_id)
        if i < len(ids) and ids[i] == msg_id and pos[i]:
            return k, i
        return -1, -1

    def get(self, msg_id: int) -> int:
        """The position of live entry ``msg_id``, or 0."""
        k, i = self._slot(msg_id)
        return self.blocks[k].pos[i] if k >= 0 else 0  # type: ignore[index]

    def __contains__(self, msg_id: int) -> bool:
        return self._slot(msg_id)[0] >= 0

    def pop(self, msg_id: int) -> int:
        """Remove entry ``msg_id``; returns its position (0: it was not there). A block goes when
        its last entry does; the open one is compacted once half its slots are dead."""
        k, i = self._slot(msg_id)
        if k < 0:
            return 0
        assert self.blocks is not None and self.firsts is not None
        b = self.blocks[k]
        ids, pos = b.ids, b.pos
        assert ids is not None and pos is not None
        p = pos[i]
        pos[i] = 0
        b.dead += 1
        b.dirty = True
        self.live -= 1
        if self.counts is not None:
            self.counts.pop(msg_id, None)
            if not self.counts:
                self.counts = None
        if self.exp is not None:
            self.exp.pop(msg_id, None)
            if not self.exp:
                self.exp = None
        if not self.live:
            self.clear()
        elif b.dead == len(ids):
            del self.blocks[k]
            del self.firsts[k]
            if b is self.tail:
                self.tail = None
                self.top_id = max(self.top_id, ids[-1])
            elif self.warm is not None and b in self.warm:
                self.warm.remove(b)
        elif b is self.tail and b.dead * 2 > len(ids) and len(ids) > 32:  # (a sealed one is packed
            # without its dead entries, or dropped when all are)
            b.ids = array("Q", (m for m, q in zip(ids, pos, strict=False) if q))
            b.pos = array("Q", (q for q in pos if q))
            b.dead = 0
        return p

    def clear(self) -> None:
        """Drop every entry (the queue is empty, or deleted)."""
        self.blocks = self.firsts = self.tail = self.warm = None
        self.live = 0

    def last_live(self) -> int:
        """The largest id of a live entry (0: none)."""
        for b in reversed(self.blocks or ()):
            ids, pos = b.unpack()
            for j in range(len(ids) - 1, -1, -1):  # dead entries at the end are rare
                if pos[j]:
                    return ids[j]
        return 0

    def entries(self) -> Iterator[tuple[int, int]]:
        """Live (message id, position) pairs, lazily: a packed block is unpacked for the walk only
        (a list of a big queue's pairs costs ~100 B each)."""
        for b in list(self.blocks or ()):
            ids, pos = b.unpack()
            yield from ((m, q) for m, q in zip(ids, pos, strict=False) if q)

    def positions(self) -> Iterator[int]:
        """Live entries' positions."""
        for b in self.blocks or ():
            yield from (q for q in b.unpack()[1] if q)

    def segment_counts(self) -> Counter[int]:
        """Segment number -> live entries in it (counted in C: a map and a Counter, no Python loop
        per entry)."""
        out: Counter[int] = Counter()
        for b in self.blocks or ():
            out.update(map(operator.rshift, b.unpack()[1], repeat(32)))
        out.pop(0, None)  # removed entries (segment numbers start at 1)
        return out


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
