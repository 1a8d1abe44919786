"""The receive buffer: one bytearray per connection plus a read offset.

Frames are parsed in place at ``pos``; consumed bytes are dropped with a single ``del`` when new
data arrives (once per batch), never per frame.
"""

from __future__ import annotations


class ReceiveBuffer:
    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        if self.pos:
            if self.pos == len(self.data):
                self.data.clear()
            else:
                del self.data[: self.pos]
            self.pos = 0
        self.data += chunk

    def __len__(self) -> int:
        """Bytes not consumed yet."""
        return len(self.data) - self.pos
