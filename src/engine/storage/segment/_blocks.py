"""The blocks a queue's index is made of (``_index._QIndex``), and the store-wide cache of the few
blocks kept unpacked.

A block holds up to ``BLOCK`` entries: parallel ``array('Q')`` of message ids (ascending) and packed
positions (0 = removed) while unpacked, or one ``_packed`` blob while packed. A queue's last block
is open (unpacked, appended to); a full one is sealed into the cache, and the cache packs the least
recently used when it holds more than its ``limit``. So a backlog of any length costs its open
block, its packed blobs (~0.04 B per entry when ids are consecutive and records equal-sized) and a
store-wide bounded number of unpacked blocks: where consumers and acks are working."""

from __future__ import annotations

from array import array
from collections import OrderedDict

from . import _packed

#: entries per block (an unpacked block is 16 B each: 64 KiB)
BLOCK = 4096
#: unpacked sealed blocks the whole store keeps (consumers' and acks' working set: 4 MiB)
WARM_BLOCKS = 64


class _Block:
    __slots__ = ("ids", "pos", "blob", "n", "live", "dirty")

    def __init__(self, ids: array[int], pos: array[int], live: int) -> None:
        self.ids: array[int] | None = ids
        self.pos: array[int] | None = pos
        self.blob: bytes | None = None  # the packed entries (kept while unpacked until one changes)
        self.n = len(ids)  # entries in ``blob``
        self.live = live
        self.dirty = True  # the arrays differ from ``blob``

    def unpack(self) -> tuple[array[int], array[int]]:
        """The block's arrays (unpacked from the blob, without keeping them, when it is packed)."""
        if self.ids is not None and self.pos is not None:
            return self.ids, self.pos
        assert self.blob is not None
        ids, pos = _packed.unpack(self.blob, self.n, 2)
        return ids, pos

    def pack(self) -> None:
        """Drop the arrays, packing them first if they changed (removed entries are left out)."""
        if self.dirty and self.ids is not None and self.pos is not None:
            ids, pos = self.ids, self.pos
            if self.live < len(ids):
                ids = array("Q", (m for m, q in zip(ids, pos, strict=False) if q))
                pos = array("Q", (q for q in pos if q))
            self.blob, self.n = _packed.pack(ids, pos), len(ids)
        self.ids = self.pos = None
        self.dirty = False


class WarmBlocks:
    """The store's unpacked sealed blocks, least recently used first (an owner touches its block
    when it moves to another one, not at every access)."""

    __slots__ = ("limit", "_lru")

    def __init__(self, limit: int = WARM_BLOCKS) -> None:
        self.limit = limit
        self._lru: OrderedDict[_Block, None] = OrderedDict()

    def use(self, b: _Block) -> tuple[array[int], array[int]]:
        """``b``'s arrays, unpacked and kept if it is packed (packing the least recently used block
        past the limit)."""
        if b.ids is None or b.pos is None:
            b.ids, b.pos = b.unpack()
        lru = self._lru
        if b in lru:
            lru.move_to_end(b)
        else:
            lru[b] = None
            while len(lru) > self.limit:
                lru.popitem(last=False)[0].pack()
        return b.ids, b.pos

    def forget(self, b: _Block) -> None:
        """``b`` left its queue (all its entries removed, or the queue deleted)."""
        self._lru.pop(b, None)

    def __len__(self) -> int:
        return len(self._lru)
