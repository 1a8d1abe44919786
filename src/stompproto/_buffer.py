"""The per-connection receive buffer: one bytearray plus a read offset.

Consumed bytes are not deleted frame by frame; the offset moves and the consumed prefix
is dropped once per incoming batch (``append``) or all at once when fully drained.
"""

from __future__ import annotations

__all__ = ["ReceiveBuffer"]


class ReceiveBuffer:
    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0  # start of the unconsumed bytes

    def append(self, chunk: bytes) -> None:
        if self.pos:
            del self.data[: self.pos]  # one compaction per batch
            self.pos = 0
        self.data += chunk

    def consume_to(self, pos: int) -> None:
        """Mark everything before ``pos`` as consumed."""
        if pos >= len(self.data):
            self.data.clear()  # cheap when the batch is fully parsed
            self.pos = 0
        else:
            self.pos = pos

    def pending(self) -> int:
        return len(self.data) - self.pos
