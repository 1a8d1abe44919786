"""``_File``: an append-only file of the segment store written at known offsets from a buffer."""

from __future__ import annotations

#: buffered bytes that trigger a write-out on the loop thread without waiting for ``sync``
FLUSH_AT = 1 << 20


class _File:
    """An append-only file written at known offsets from a buffer (retried after a failed write)."""

    __slots__ = ("path", "fd", "written", "buf", "dirty")

    def __init__(self, path: str, fd: int, written: int) -> None:
        self.path = path
        self.fd = fd
        self.written = written
        self.buf = bytearray()
        self.dirty = False

    @property
    def size(self) -> int:
        return self.written + len(self.buf)
