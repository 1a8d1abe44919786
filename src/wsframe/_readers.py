"""Frames out of the receive buffer, then frames into message/control events."""
from __future__ import annotations

import codecs
import zlib
from struct import Struct

from ._buffer import ReceiveBuffer
from ._deflate import Inflater, MessageTooBig
from ._errors import RemoteProtocolError
from ._events import (
    BytesMessage,
    CloseConnection,
    CloseReason,
    Event,
    Ping,
    Pong,
    TextMessage,
    is_wire_close_code,
)
from ._mask import mask

__all__ = ["FrameReader", "MessageReader", "OP_BINARY", "OP_CLOSE", "OP_CONT", "OP_PING", "OP_PONG", "OP_TEXT"]

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_KNOWN_OPCODES = frozenset({OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG})
_U16 = Struct("!H")
_U64 = Struct("!Q")
_MAX_CONTROL = 125


def _fail(msg: str, code: int = CloseReason.PROTOCOL_ERROR) -> RemoteProtocolError:
    return RemoteProtocolError(msg, hint=CloseConnection(code, msg[:100]))


class FrameReader:
    """Parses one frame at a time from ``buf``: header checks happen as soon as the header
    is complete (so an oversized frame fails before its payload is awaited), and a parsed
    header is remembered while the payload trickles in."""

    __slots__ = ("_buf", "_expect_mask", "_max_frame", "_pending", "_rsv1_ok")

    def __init__(self, buf: ReceiveBuffer, *, expect_mask: bool, max_frame_size: int, rsv1_ok: bool) -> None:
        self._buf = buf
        self._expect_mask = expect_mask
        self._max_frame = max_frame_size
        self._rsv1_ok = rsv1_ok
        self._pending: tuple[int, int, int, bool] | None = None  # (b0, header length, payload length, masked)

    def set_max_frame_size(self, size: int) -> None:
        self._max_frame = size

    def next_frame(self) -> tuple[int, bool, bool, bytes] | None:
        """(opcode, fin, rsv1, unmasked payload), or None until the frame is complete."""
        buf = self._buf
        data, pos = buf.data, buf.pos
        header = self._pending
        if header is None:
            header = self._parse_header(data, pos)
            if header is None:
                return None
            self._pending = header
        b0, hlen, length, masked = header
        end = pos + hlen + length
        if len(data) < end:
            return None
        self._pending = None
        buf.pos = end
        if masked:
            payload = mask(bytes(data[pos + hlen - 4 : pos + hlen]), memoryview(data)[pos + hlen : end])
        else:
            payload = bytes(data[pos + hlen : end])
        return b0 & 0x0F, bool(b0 & 0x80), bool(b0 & 0x40), payload

    def _parse_header(self, data: bytearray, pos: int) -> tuple[int, int, int, bool] | None:
        avail = len(data) - pos
        if avail < 2:
            return None
        b0, b1 = data[pos], data[pos + 1]
        opcode = b0 & 0x0F
        if opcode not in _KNOWN_OPCODES:
            raise _fail(f"reserved opcode {opcode:#x}")
        if b0 & 0x30 or (b0 & 0x40 and not self._rsv1_ok):
            raise _fail("reserved bit set without a negotiated extension")
        control = opcode & 0x08
        if control:
            if not b0 & 0x80:
                raise _fail("fragmented control frame")
            if b0 & 0x40:
                raise _fail("RSV1 on a control frame")
        masked = bool(b1 & 0x80)
        if masked is not self._expect_mask:
            raise _fail("client frame not masked" if self._expect_mask else "server frame masked")
        length = b1 & 0x7F
        hlen = 2
        if length == 126:
            if avail < 4:
                return None
            (length,) = _U16.unpack_from(data, pos + 2)
            hlen = 4
            if length < 126:
                raise _fail("non-minimal 16-bit payload length")
        elif length == 127:
            if avail < 10:
                return None
            (length,) = _U64.unpack_from(data, pos + 2)
            hlen = 10
            if length >> 63:
                raise _fail("64-bit payload length with the top bit set")
            if length <= 0xFFFF:
                raise _fail("non-minimal 64-bit payload length")
        if control and length > _MAX_CONTROL:
            raise _fail("control frame payload over 125 bytes")
        if length > self._max_frame:
            raise _fail(f"frame of {length} bytes over the {self._max_frame} limit", CloseReason.MESSAGE_TOO_BIG)
        if masked:
            hlen += 4
        if avail < hlen:
            return None
        return b0, hlen, length, masked


def parse_close(payload: bytes) -> CloseConnection:
    if not payload:
        return CloseConnection(CloseReason.NO_STATUS_RCVD, "")
    if len(payload) == 1:
        raise _fail("close payload of one byte")
    (code,) = _U16.unpack_from(payload)
    if not is_wire_close_code(code):
        raise _fail(f"invalid close code {code}")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("close reason is not UTF-8", CloseReason.INVALID_FRAME_PAYLOAD_DATA) from None
    return CloseConnection(code, reason)


class MessageReader:
    """Turns frames into events: reassembly (or fragment delivery), decompression,
    incremental UTF-8 validation, and the message size limit."""

    __slots__ = ("_compressed", "_decoder", "_fragments", "_inflater", "_max_message", "_opcode", "_parts", "_size")

    def __init__(self, *, max_message_size: int, inflater: Inflater | None, deliver_fragments: bool) -> None:
        self._max_message = max_message_size
        self._inflater = inflater
        self._fragments = deliver_fragments
        self._opcode: int | None = None  # of the message in progress
        self._compressed = False
        self._decoder: codecs.IncrementalDecoder | None = None
        self._parts: list[bytes] | list[str] = []
        self._size = 0

    def set_max_message_size(self, size: int) -> None:
        self._max_message = size

    @property
    def assembling(self) -> int:
        """Bytes of the message in progress received so far (0 between messages)."""
        return self._size if self._opcode is not None else 0

    def frame(self, opcode: int, fin: bool, rsv1: bool, payload: bytes) -> Event | None:
        if opcode == OP_PING:
            return Ping(payload)
        if opcode == OP_PONG:
            return Pong(payload)
        if opcode == OP_CLOSE:
            return parse_close(payload)
        if fin and not rsv1 and self._opcode is None and opcode != OP_CONT:
            # fast path: a whole, uncompressed message in one frame
            if len(payload) > self._max_message:
                raise _fail(f"message over the {self._max_message} byte limit", CloseReason.MESSAGE_TOO_BIG)
            if opcode == OP_BINARY:
                return BytesMessage(payload)
            try:
                return TextMessage(payload.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise _fail(f"text message is not UTF-8: {exc.reason}",
                            CloseReason.INVALID_FRAME_PAYLOAD_DATA) from None
        if opcode == OP_CONT:
            if self._opcode is None:
                raise _fail("continuation frame without a message in progress")
            if rsv1:
                raise _fail("RSV1 on a continuation frame")
        else:
            if self._opcode is not None:
                raise _fail("new data frame inside a fragmented message")
            self._opcode = opcode
            self._compressed = rsv1
            self._size = 0
            if opcode == OP_TEXT:
                self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        return self._data(fin, payload)

    def _data(self, fin: bool, payload: bytes) -> Event | None:
        limit = self._max_message - self._size
        if self._compressed:
            assert self._inflater is not None  # RSV1 is only accepted when negotiated
            try:
                payload = self._inflater.inflate(payload, fin, limit)
            except MessageTooBig:
                raise _fail(f"message over the {self._max_message} byte limit", CloseReason.MESSAGE_TOO_BIG) from None
            except (zlib.error, ValueError) as exc:
                raise _fail(f"bad compressed data: {exc}", CloseReason.INVALID_FRAME_PAYLOAD_DATA) from None
        elif len(payload) > limit:
            raise _fail(f"message over the {self._max_message} byte limit", CloseReason.MESSAGE_TOO_BIG)
        self._size += len(payload)
        data: bytes | str = payload
        if self._decoder is not None:
            try:
                data = self._decoder.decode(payload, fin)
            except UnicodeDecodeError as exc:
                raise _fail(f"text message is not UTF-8: {exc.reason}",
                            CloseReason.INVALID_FRAME_PAYLOAD_DATA) from None
        opcode = self._opcode
        if fin:
            self._opcode = None
            self._decoder = None
        if self._fragments:
            return TextMessage(data, fin) if opcode == OP_TEXT else BytesMessage(data, fin)  # type: ignore[arg-type]
        parts = self._parts
        if data:  # empty continuation frames must not grow the list (they cost the peer 6 bytes each)
            parts.append(data)  # type: ignore[arg-type]
        if not fin:
            return None
        self._parts = []
        if opcode == OP_TEXT:
            return TextMessage(parts[0] if len(parts) == 1 else "".join(parts))  # type: ignore[arg-type]
        return BytesMessage(parts[0] if len(parts) == 1 else b"".join(parts))  # type: ignore[arg-type]
