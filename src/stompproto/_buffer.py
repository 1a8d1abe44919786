"""The per-connection receive buffer: the received bytes plus a read offset.

While a chunk is parsed on its own, ``data`` *is* that chunk (``bytes``): slicing a frame's body out
of it yields ``bytes`` with a single copy, and nothing is copied in. The start of a frame left over
at the end of a chunk is joined with the next chunk into new ``bytes`` when it is no longer than that
chunk (so the copying stays linear in the input); a longer leftover (a large frame arriving in many
chunks, or a peer dribbling bytes) makes ``data`` a ``bytearray`` with amortised appends. Consumed
bytes are not deleted frame by frame; the offset moves and the consumed prefix is dropped once per
incoming chunk (``feed``), or all at once when drained.
"""

from __future__ import annotations

__all__ = ["ReceiveBuffer"]


class ReceiveBuffer:
    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data: bytes | bytearray = b""
        self.pos = 0  # start of the unconsumed bytes

    def feed(self, chunk: bytes) -> None:
        data = self.data
        pos = self.pos
        self.pos = 0
        rest = len(data) - pos
        if rest <= 0:  # nothing left over: parse the chunk in place
            self.data = chunk if type(chunk) is bytes else bytes(chunk)
            return
        if rest <= len(chunk):  # a frame's start left over: copying it costs no more than the chunk
            self.data = b"".join((memoryview(data)[pos:], chunk))
            return
        if isinstance(data, bytearray):
            if pos:
                del data[:pos]  # one compaction per chunk
        else:
            data = self.data = bytearray(memoryview(data)[pos:])
        data += chunk

    def consume_to(self, pos: int) -> None:
        """Mark everything before ``pos`` as consumed."""
        if pos >= len(self.data):
            self.data = b""  # cheap when the chunk is fully parsed
            self.pos = 0
        else:
            self.pos = pos

    def __len__(self) -> int:
        """Bytes not consumed yet."""
        return len(self.data) - self.pos
