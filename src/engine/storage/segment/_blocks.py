"""The blocks a queue's index is made of (``_index._QIndex``).

A block holds up to ``BLOCK`` entries: parallel ``array('Q')`` of message ids (ascending) and packed
positions (0 = removed) while unpacked, or one ``_packed`` blob while packed. A queue's last block
is open (unpacked, appended to). A full one is sealed: packed at once, unless consumers are already
acking in it; a queue keeps at most ``WARM`` sealed blocks unpacked, the ones its readers and acks
used last, so a consumer walking a backlog unpacks each block once. A backlog of any length costs
its open block, its blobs (~0.04 B per entry when ids are consecutive and records equal-sized) and
at most ``WARM`` unpacked blocks; one queue's traffic never packs another queue's blocks."""

from __future__ import annotations

from array import array

from . import _packed

#: entries per block (an unpacked block is 16 B each: 64 KiB)
BLOCK = 4096
#: sealed blocks a queue keeps unpacked (where it is read, acks lagging behind in one or two places,
#: and a block boundary between)
WARM = 4


class _Block:
    __slots__ = ("ids", "pos", "blob", "n", "dead", "dirty", "sealed")

    def __init__(self, ids: array[int], pos: array[int]) -> None:
        self.ids: array[int] | None = ids
        self.pos: array[int] | None = pos
        self.blob: bytes | None = None  # the packed entries (kept while unpacked until one changes)
        self.n = 0  # entries in ``blob``
        self.dead = 0  # removed entries in the arrays (a packed block holds none)
        self.dirty = True  # the arrays differ from ``blob``
        self.sealed = False

    def unpack(self) -> tuple[array[int], array[int]]:
        """The block's arrays (unpacked from the blob, without keeping them, when it is packed)."""
        if self.ids is not None and self.pos is not None:
            return self.ids, self.pos
        assert self.blob is not None
        ids, pos = _packed.unpack(self.blob, self.n, 2)
        return ids, pos

    def thaw(self) -> tuple[array[int], array[int]]:
        """Unpack and keep the arrays."""
        if self.ids is None or self.pos is None:
            self.ids, self.pos = self.unpack()
            self.dirty = False
        return self.ids, self.pos

    def pack(self) -> None:
        """Drop the arrays, packing them first if they changed (removed entries are left out)."""
        if self.dirty and self.ids is not None and self.pos is not None:
            ids, pos = self.ids, self.pos
            if self.dead:
                ids = array("Q", (m for m, q in zip(ids, pos, strict=False) if q))
                pos = array("Q", (q for q in pos if q))
            self.blob, self.n = _packed.pack(ids, pos), len(ids)
            self.dead = 0
        self.ids = self.pos = None
        self.dirty = False
