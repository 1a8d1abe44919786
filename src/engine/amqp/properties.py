"""A model message's AMQP basic properties: the decoded form for basic.get-ok and basic.return,
and the encoded bytes a delivery carries (constants for the common plain messages; a
``SharedMessage``, a stream record that many consumers read, is encoded once and keeps the bytes)."""

from __future__ import annotations

import struct

from amqpproto import BasicProperties, write_value
from amqpproto.spec import encode_properties

from .._message import Message, SharedMessage
from .._props import headers_to_props
from ..model.quorum import DELIVERY_COUNT
from ..model.streams import STREAM_OFFSET_HEADER

__all__ = ["message_props", "props_bytes", "counted_props"]


def message_props(msg: Message) -> BasicProperties:
    return headers_to_props(msg.headers, msg.persistent, msg.priority)


def counted_props(msg: Message, count: int) -> BasicProperties:
    """``msg``'s properties with the ``x-delivery-count`` header a quorum queue's deliveries
    carry (the message itself is shared with other queues and keeps its headers)."""
    return headers_to_props({**msg.headers, DELIVERY_COUNT: count}, msg.persistent, msg.priority)


_PLAIN_PROPS = encode_properties(headers_to_props({}, False, 0))
_PERSISTENT_PROPS = encode_properties(headers_to_props({}, True, 0))


def props_bytes(msg: Message) -> bytes:
    """The encoded AMQP properties of ``msg``: constants for a message whose headers are empty or
    only the ``persistent`` marker (the common case: ``headers_to_props`` then only looks at
    ``msg.persistent``), else encoded; a ``SharedMessage``'s encoding is kept with it."""
    if type(msg) is SharedMessage:
        props = msg.amqp_props
        if props is not None:
            return props
        props = msg.amqp_props = _encode(msg)
        return props
    return _encode(msg)


#: a stream record published with no properties but persistence: its headers table holds only the
#: offset, so the properties are a flag word, that one-entry table and the delivery mode. The offset
#: is a field value of the narrowest width ``write_value`` picks; per width (its highest value) the
#: constant prefix up to the value and the value's packing (with the delivery mode after it)
_OFFSET_KEY = bytes((len(STREAM_OFFSET_HEADER),)) + STREAM_OFFSET_HEADER.encode()
_FLAGS_HEADERS_MODE = struct.pack(">H", 0x2000 | 0x1000)
_U32 = struct.Struct(">I")
_OFFSET_WIDTHS = tuple(
    (top, _FLAGS_HEADERS_MODE + _U32.pack(len(_OFFSET_KEY) + 1 + struct.calcsize(fmt)) + _OFFSET_KEY + tag,
     struct.Struct(">" + fmt + "B"))
    for top, tag, fmt in ((0x7F, b"b", "b"), (0x7FFF, b"s", "h"), (0xFFFF, b"u", "H"), (0x7FFFFFFF, b"I", "i"),
                          (0xFFFFFFFF, b"i", "I"), (0x7FFFFFFFFFFFFFFF, b"l", "q")))


def _stream_record_props(offset: int) -> bytes:
    for top, prefix, value in _OFFSET_WIDTHS:
        if offset <= top:  # offsets are >= 0
            return prefix + value.pack(offset, 2)
    entry = _OFFSET_KEY + write_value(offset)
    return b"".join((_FLAGS_HEADERS_MODE, _U32.pack(len(entry)), entry, b"\x02"))


def _encode(msg: Message) -> bytes:
    headers = msg.headers
    n = len(headers)
    if not n or (n == 1 and "persistent" in headers):
        return _PERSISTENT_PROPS if msg.persistent else _PLAIN_PROPS
    if n == 2 and msg.persistent and "persistent" in headers:  # the common stream record
        offset = headers.get(STREAM_OFFSET_HEADER)
        if type(offset) is int:
            return _stream_record_props(offset)
    return encode_properties(headers_to_props(msg.headers, msg.persistent, msg.priority))

