"""``_File``: an append-only file of the segment store written at known offsets from a buffer."""

from __future__ import annotations

from collections.abc import Callable

#: buffered bytes that trigger a write-out on the loop thread without waiting for ``sync``
FLUSH_AT = 1 << 20
#: a segment's zeros are written this far ahead of its data
ZERO_AHEAD = 1 << 20
_ZEROS = bytes(ZERO_AHEAD)


class _File:
    """An append-only file written at known offsets from a buffer (retried after a failed write)."""

    __slots__ = ("path", "fd", "written", "buf", "dirty", "zeroed", "synced", "rewrite")

    def __init__(self, path: str, fd: int, written: int) -> None:
        self.path = path
        self.fd = fd
        self.written = written
        self.buf = bytearray()
        self.dirty = False
        #: the file's zeros written ahead of ``written`` end here (see ``zero_ahead``)
        self.zeroed = written
        #: what the last successful fsync covered (a file opened is as durable as it is)
        self.synced = written
        self.rewrite = False  # a failed fsync left its unsynced pages to write again

    @property
    def size(self) -> int:
        return self.written + len(self.buf)


def zero_ahead(f: _File, limit: int, pwrite: Callable[[int, memoryview, int], int]) -> None:
    """Write zeros ahead of ``f``'s end (its buffer written out), ``ZERO_AHEAD`` bytes at a time and
    never past ``limit`` (the segment size), once fewer than a quarter of them are left. Appends
    then overwrite blocks the file already has, so their fdatasync flushes data only: no size or
    extent update, no file-system journal commit (fallocate would still leave unwritten extents to
    convert); one fdatasync in ~ZERO_AHEAD bytes carries the extension. Recovery stops at the first
    zero length (``_records``). Caller holds the store's lock (the loop appends to the same file)."""
    if f.zeroed - f.written >= ZERO_AHEAD // 4 or f.zeroed >= limit:
        return
    at = max(f.zeroed, f.written)
    end = min(f.written + ZERO_AHEAD, limit)
    zeros = memoryview(_ZEROS)
    while at < end:
        at += pwrite(f.fd, zeros[: end - at], at)
    f.zeroed = max(f.zeroed, end)
    f.dirty = True
