"""One receive buffer per connection: parse in place, trim once per batch."""
from __future__ import annotations

__all__ = ["ReceiveBuffer"]


class ReceiveBuffer:
    """``data[pos:]`` is unparsed. Readers advance ``pos``; ``compact`` drops the parsed
    prefix with a single ``del`` (called once per received batch, not per frame)."""

    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0

    def feed(self, chunk: bytes | bytearray | memoryview) -> None:
        if self.pos:
            self.compact()
        self.data += chunk

    def compact(self) -> None:
        del self.data[: self.pos]
        self.pos = 0

    def __len__(self) -> int:
        return len(self.data) - self.pos
