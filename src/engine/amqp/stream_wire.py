"""Stream deliveries from the stored bytes: a record's AMQP content properties are spliced from a
template made once per distinct stored header table (and route, priority and flags), on its second
sighting (bytes met once take the general path: a template would not pay), so a read window is
delivered without a ``Message`` per record.

A delivery's properties are what ``props_bytes`` encodes for the record with its ``x-stream-offset``
header (and ``x-stream-timestamp`` for the consumers that asked for it) added last to its headers:
the flag word and the fields before ``headers`` (``pre``), the headers table's size, the record's
own headers (``table``, fixed), the offset (and timestamp) entries, the fields after it (``post``).
Only the size and the added entries change from record to record. A record whose headers already
hold one of the added names (the added value then replaces it in place) or that were stored as
key/value pairs (a key too long for a table) takes the general path: decoded, ``delivery_message``,
``props_bytes``. ``tests/engine/test_stream_wire.py`` holds both paths to the same bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from amqpproto import write_table, write_value
from amqpproto.spec import encode_properties

from .._props import headers_to_props
from ..model.streams import STREAM_OFFSET_HEADER, STREAM_TIMESTAMP_HEADER, delivery_message
from ..records import _HDR_PAIRS, _MSG, _decode_message
from ..streams import StreamRecord
from .properties import props_bytes

__all__ = ["delivery_items"]

#: where the fields that make a template start in a stored message (after the id, expiry and ack
#: timeout, which deliveries do not show), and its lengths of route and headers
_KEY_AT = struct.calcsize("<Qdd")
_LENGTHS = struct.Struct("<HHI")
_LENGTHS_AT = _KEY_AT + 2
_U32 = struct.Struct(">I").pack
_OFFSET_KEY = bytes((len(STREAM_OFFSET_HEADER),)) + STREAM_OFFSET_HEADER.encode()
_STAMP_KEY = bytes((len(STREAM_TIMESTAMP_HEADER),)) + STREAM_TIMESTAMP_HEADER.encode()
_HEADERS_FLAG = 0x2000

#: a template: (exchange, routing key, pre, table, post, the properties up to the added entries by
#: their length); None: the record takes the general path
Template = tuple[str, str, bytes, bytes, bytes, dict[int, bytes]] | None
#: templates by the stored bytes from the priority to the end of the headers; bounded
_TEMPLATES: dict[bytes, Template] = {}
_TEMPLATES_MAX = 256
#: keys met once: a template is made on a key's second sighting, so records whose stored bytes
#: never repeat (an id that differs in each) cost the general path and no more; bounded
_SEEN: set[bytes] = set()


def _template(payload: bytes | memoryview) -> Template:
    msg = _decode_message(payload)
    headers = msg.headers
    flags = _MSG.unpack_from(payload, 0)[4]
    if flags & _HDR_PAIRS or STREAM_OFFSET_HEADER in headers or STREAM_TIMESTAMP_HEADER in headers:
        return None
    props = headers_to_props({**headers, STREAM_OFFSET_HEADER: 0}, msg.persistent, msg.priority)
    table = dict(props.headers or {})
    del table[STREAM_OFFSET_HEADER]
    props.headers = None
    rest = encode_properties(props)  # the same fields, the headers' flag and table left out
    lead = len(encode_properties(type(props)(content_type=props.content_type,
                                             content_encoding=props.content_encoding)))
    (word,) = struct.unpack_from(">H", rest)
    pre = struct.pack(">H", word | _HEADERS_FLAG) + rest[2:lead]
    return msg.exchange, msg.routing_key, pre, write_table(table)[4:], rest[lead:], {}


def _general(offset: int, ts: int, payload: bytes | memoryview,
             stamp: bool) -> tuple[str, str, bytes, bytes | memoryview]:
    msg = delivery_message(StreamRecord(offset, ts, _decode_message(payload)), True, stamp)
    return msg.exchange, msg.routing_key, props_bytes(msg), msg.body


def _offset_width(offset: int) -> tuple[int, int, bytes, Callable[[int], bytes]]:
    """The range of offsets ``write_value`` encodes as wide as ``offset`` (offsets are >= 0): its
    bounds, the entry's key and type tag, the value's packing."""
    low = 0
    for top, tag, fmt in _WIDTHS:
        if offset <= top:
            return low, top, _OFFSET_KEY + tag, struct.Struct(">" + fmt).pack
        low = top + 1
    raise ValueError(f"offset {offset} does not fit a field table value")


#: ``write_value``'s integer types for values >= 0, narrowest first: (highest value, tag, packing)
_WIDTHS = ((0x7F, b"b", "b"), (0x7FFF, b"s", "h"), (0xFFFF, b"u", "H"), (0x7FFFFFFF, b"I", "i"),
           (0xFFFFFFFF, b"i", "I"), (0x7FFFFFFFFFFFFFFF, b"l", "q"))


def delivery_items(records: list[tuple[int, int, Any]],
                   stamp: bool) -> list[tuple[str, str, bytes, bytes | memoryview]]:
    """(exchange, routing key, encoded properties, body) of each stored (offset, timestamp,
    message bytes) as delivered to a stream consumer (``stamp``: one that asked for append times)."""
    out: list[tuple[str, str, bytes, bytes | memoryview]] = []
    append = out.append
    templates = _TEMPLATES
    lengths = _LENGTHS.unpack_from
    low = top = -1
    entry = b""
    pack: Callable[[int], bytes] = bytes
    for offset, ts, p in records:
        lex, lrk, lhdr = lengths(p, _LENGTHS_AT)
        at = _MSG.size + lex + lrk + lhdr
        key = p[_KEY_AT:at]
        if type(key) is not bytes:
            key = key.tobytes()
        t: Any = templates.get(key, False)
        if t is False:
            if key not in _SEEN:
                if len(_SEEN) >= _TEMPLATES_MAX:
                    _SEEN.clear()
                _SEEN.add(key)
                append(_general(offset, ts, p, stamp))
                continue
            if len(templates) >= _TEMPLATES_MAX:
                templates.clear()
            t = templates[key] = _template(p)
        if t is None:
            append(_general(offset, ts, p, stamp))
            continue
        if not low <= offset <= top:  # offsets grow: the width rarely changes within a window
            low, top, entry, pack = _offset_width(offset)
        added = entry + pack(offset)
        if stamp:
            added += _STAMP_KEY + write_value(ts)
        ex, rk, pre, table, post, heads = t
        head = heads.get(len(added))
        if head is None:  # the properties up to the added entries, per their length
            head = heads[len(added)] = pre + _U32(len(table) + len(added)) + table
        append((ex, rk, head + added + post, p[at:]))
    return out
