"""Events into frames: headers, masking, fragmentation and compression of outgoing messages."""
from __future__ import annotations

from collections.abc import Callable
from struct import Struct

from ._deflate import Deflater
from ._errors import LocalProtocolError
from ._events import CloseReason, is_wire_close_code
from ._mask import mask
from ._readers import OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT

__all__ = ["FrameWriter"]

_H7 = Struct("!BB")
_H16 = Struct("!BBH")
_H64 = Struct("!BBQ")
_CODE = Struct("!H")


class FrameWriter:
    __slots__ = ("_deflater", "_mask_key", "_msg_compressed", "_msg_opcode")

    def __init__(self, *, mask_key: Callable[[], bytes] | None, deflater: Deflater | None) -> None:
        self._mask_key = mask_key  # client role: a fresh 4-byte key per frame
        self._deflater = deflater
        self._msg_opcode: int | None = None  # opcode of an outgoing fragmented message
        self._msg_compressed = False

    def frame(self, opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False) -> bytes:
        n = len(payload)
        b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
        m = 0x80 if self._mask_key is not None else 0
        if n < 126:
            header = _H7.pack(b0, m | n)
        elif n <= 0xFFFF:
            header = _H16.pack(b0, m | 126, n)
        else:
            header = _H64.pack(b0, m | 127, n)
        if self._mask_key is None:
            return b"".join((header, payload))  # one copy, however big the payload
        key = self._mask_key()
        return b"".join((header, key, mask(key, payload)))

    def message(self, payload: bytes, text: bool, fin: bool) -> bytes:
        opcode = OP_TEXT if text else OP_BINARY
        if self._msg_opcode is None:
            first = True
            self._msg_opcode = opcode
            deflater = self._deflater
            self._msg_compressed = deflater is not None and deflater.enabled
        elif self._msg_opcode != opcode:
            raise LocalProtocolError("cannot mix text and bytes fragments in one message")
        else:
            first = False
        if self._msg_compressed:
            payload = self._deflater.compress(payload, fin)  # type: ignore[union-attr]
        if fin:
            self._msg_opcode = None
        return self.frame(opcode if first else OP_CONT, payload, fin, rsv1=first and self._msg_compressed)

    def control(self, opcode: int, payload: bytes) -> bytes:
        if len(payload) > 125:
            raise LocalProtocolError("control frame payload over 125 bytes")
        return self.frame(opcode, bytes(payload))

    def ping(self, payload: bytes) -> bytes:
        return self.control(OP_PING, payload)

    def pong(self, payload: bytes) -> bytes:
        return self.control(OP_PONG, payload)

    def close(self, code: int | None, reason: str) -> bytes:
        if code is None or code == CloseReason.NO_STATUS_RCVD:
            if reason:
                raise LocalProtocolError("a close reason needs a close code")
            return self.control(OP_CLOSE, b"")
        if not is_wire_close_code(code):
            raise LocalProtocolError(f"close code {code} may not be sent")
        raw = reason.encode("utf-8")
        if len(raw) > 123:
            raise LocalProtocolError("close reason over 123 bytes")
        return self.control(OP_CLOSE, _CODE.pack(code) + raw)
