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

A deduplicating producer's records (the Spark sink's) differ in one header, an integer
``x-publishing-id``: they share a template keyed by their stored bytes without that value's bytes
(checked once: the bytes are that header's value and nothing else), whose table is split around
the value; each record's value is spliced in as ``write_value`` encodes it, the narrowest integer
type (so the table's size follows the value's width, as with the offset).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from amqpproto import write_table, write_value
from amqpproto.spec import encode_properties

from .._props import headers_to_props
from ..model.streams import PUBLISHING_ID_HEADER, STREAM_OFFSET_HEADER, STREAM_TIMESTAMP_HEADER, delivery_message
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

#: a template: (exchange, routing key, pre, the headers table (up to the varying entry's value when
#: there is one), the table after that value, post, the properties up to the spliced bytes by the
#: length of what is spliced into the table); None: the record takes the general path
Template = tuple[str, str, bytes, bytes, bytes, bytes, dict[int, bytes]] | None
#: templates by the stored bytes from the priority to the end of the headers; bounded
_TEMPLATES: dict[bytes, Template] = {}
_TEMPLATES_MAX = 256
#: keys met once: a template is made on a key's second sighting, so records whose stored bytes
#: never repeat (an id that differs in each) cost the general path and no more; bounded
_SEEN: set[bytes] = set()

#: the one header whose value may differ between the records of a template: a deduplicating
#: producer's publishing id, different in every record (its ``x-producer`` is not)
_VARYING_KEY = bytes((len(PUBLISHING_ID_HEADER),)) + PUBLISHING_ID_HEADER.encode()
#: field table integer types: the value's struct after the type octet
_INTS = {ord(tag): struct.Struct(">" + fmt) for tag, fmt in (("b", "b"), ("B", "B"), ("s", "h"), ("u", "H"),
                                                            ("I", "i"), ("i", "I"), ("l", "q"), ("L", "Q"))}
#: ``write_value``'s integer type by value: (lowest, highest, tag), ascending; its choice is the
#: narrowest, so a value's width (and the table's size) depends on the value
_WIDTHS = ((-(2**63), -(2**31) - 1, "l"), (-(2**31), -32769, "I"), (-32768, -129, "s"), (-128, 127, "b"),
           (128, 32767, "s"), (32768, 65535, "u"), (65536, 2**31 - 1, "I"), (2**31, 2**32 - 1, "i"),
           (2**32, 2**63 - 1, "l"), (2**63, 2**64 - 1, "L"))
_LOWEST = [low for low, _, _ in _WIDTHS]


def _int_width(value: int) -> tuple[int, int, bytes, Callable[[int], bytes]]:
    """The range of integers ``write_value`` encodes as it encodes ``value``: its bounds, type
    octet and the packing of a value."""
    i = bisect_right(_LOWEST, value) - 1
    if i < 0 or value > _WIDTHS[i][1]:
        raise ValueError(f"integer {value} does not fit a field table value")
    low, top, tag = _WIDTHS[i]
    return low, top, tag.encode(), _INTS[ord(tag)].pack


class _Varying:
    """Records whose stored bytes (``size`` long) are ``before``, an integer publishing id stored as
    ``stored`` packs it, ``after``: one template for all (``template``: its table split around the
    id's delivered value)."""

    __slots__ = ("size", "before", "after", "at", "stored", "template")

    def __init__(self, key: bytes, at: int, stored: struct.Struct, template: Template) -> None:
        self.size = len(key)
        self.before = key[:at]
        self.after = key[at + stored.size:]
        self.at = at
        self.stored = stored
        self.template = template


#: varying templates by their stored bytes without the id's value; None: not one (the bytes found
#: are not that header's value alone, or the record takes the general path); bounded
_VARYING: dict[bytes, _Varying | None] = {}


def _template(payload: bytes | memoryview, varying: bool = False) -> Template:
    """``varying``: the table split after the publishing id's name and type octet (an int there)."""
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
    head, tail = write_table(table)[4:], b""
    if varying:  # the entries before the id, its name; the entries after it
        i = list(table).index(PUBLISHING_ID_HEADER)
        items = list(table.items())
        head = write_table(dict(items[:i]))[4:] + _VARYING_KEY
        tail = write_table(dict(items[i + 1:]))[4:]
    return msg.exchange, msg.routing_key, pre, head, tail, rest[lead:], {}


def _general(offset: int, ts: int, payload: bytes | memoryview,
             stamp: bool) -> tuple[str, str, bytes, bytes | memoryview]:
    msg = delivery_message(StreamRecord(offset, ts, _decode_message(payload)), True, stamp)
    return msg.exchange, msg.routing_key, props_bytes(msg), msg.body


def _first_sighting(key: bytes) -> bool:
    """Whether ``key`` is met for the first time (it is remembered)."""
    if key in _SEEN:
        return False
    if len(_SEEN) >= _TEMPLATES_MAX:
        _SEEN.clear()
    _SEEN.add(key)
    return True


def _same_as_general(offset: int, ts: int, payload: bytes | memoryview, stamp: bool) -> bool:
    """Whether the template just made for ``payload`` delivers it as the general path does: each
    template is checked once, on the record it was made from."""
    (got,) = delivery_items([(offset, ts, payload)], stamp)
    return got[:3] == _general(offset, ts, payload, stamp)[:3]


def _only_the_id(payload: bytes | memoryview, at: int, stored: struct.Struct) -> bool:
    """Whether the ``stored.size`` bytes at ``at`` are the value of the record's integer publishing
    id header and nothing else: the record read with other bytes there has the same headers but for
    that id, which is those bytes' value (so any value there reads so)."""
    n = stored.size
    raw = bytes(payload)
    other = (int.from_bytes(raw[at:at + n], "big") ^ ((1 << 8 * n) - 1)).to_bytes(n, "big")  # all bytes differ
    try:
        one = _decode_message(raw).headers
        two = _decode_message(raw[:at] + other + raw[at + n:]).headers
    except Exception:  # those bytes were more than a value: whatever reading them otherwise raises
        return False
    value = one.get(PUBLISHING_ID_HEADER)
    return type(value) is int and value == stored.unpack_from(raw, at)[0] \
        and two.get(PUBLISHING_ID_HEADER) == stored.unpack(other)[0] and {**two, PUBLISHING_ID_HEADER: value} == one


def _varying(key: bytes, table_at: int, offset: int, ts: int, payload: bytes | memoryview,
             stamp: bool) -> _Varying | None:
    """The varying template of a record whose key (from ``table_at`` on: its headers) holds an
    integer publishing id; None when it has none, or not one a template can vary."""
    at = key.find(_VARYING_KEY, table_at)
    if at < 0:
        return None
    at += len(_VARYING_KEY) + 1  # the value, after its type octet
    stored = _INTS.get(key[at - 1]) if at <= len(key) else None
    if stored is None or at + stored.size > len(key):
        return None
    masked = key[:at] + key[at + stored.size:]
    if masked in _VARYING:
        return _VARYING[masked]
    if _first_sighting(masked):
        return None
    if len(_VARYING) >= _TEMPLATES_MAX:
        _VARYING.clear()
    shape = None
    if _only_the_id(payload, _KEY_AT + at, stored):
        template = _template(payload, True)
        if template is not None:
            shape = _VARYING[masked] = _Varying(key, at, stored, template)
            if not _same_as_general(offset, ts, payload, stamp):
                shape = None
    _VARYING[masked] = shape
    return shape


def _on_miss(key: bytes, table_at: int, offset: int, ts: int, payload: bytes | memoryview,
             stamp: bool) -> Template | _Varying:
    """The template of a key not among the templates: a varying one, else (on its second sighting)
    one of its own; None (the general path) on a first sighting."""
    shape = _varying(key, table_at, offset, ts, payload, stamp)
    if shape is not None:
        return shape
    if _first_sighting(key):
        return None
    templates = _TEMPLATES
    if len(templates) >= _TEMPLATES_MAX:
        templates.clear()
    t = templates[key] = _template(payload)
    if t is not None and not _same_as_general(offset, ts, payload, stamp):
        t = templates[key] = None
    return t


def delivery_items(records: list[tuple[int, int, Any]],
                   stamp: bool) -> list[tuple[str, str, bytes, bytes | memoryview]]:
    """(exchange, routing key, encoded properties, body) of each stored (offset, timestamp,
    message bytes) as delivered to a stream consumer (``stamp``: one that asked for append times)."""
    out: list[tuple[str, str, bytes, bytes | memoryview]] = []
    append = out.append
    templates = _TEMPLATES
    lengths = _LENGTHS.unpack_from
    low = top = -1
    entry = vtag = b""
    pack: Callable[[int], bytes] = bytes
    # the varying template met last, what it matches, and the width of the ids met last
    shape: _Varying | None = None
    size = 0
    before = after = b""
    vlow, vtop = 1, 0
    vpack: Callable[[int], bytes] = bytes
    t: Any
    for offset, ts, p in records:
        lex, lrk, lhdr = lengths(p, _LENGTHS_AT)
        at = _MSG.size + lex + lrk + lhdr
        key = p[_KEY_AT:at]
        if type(key) is not bytes:
            key = key.tobytes()
        if len(key) == size and key.startswith(before) and key.endswith(after):
            t = shape
        else:
            t = templates.get(key, False)
            if t is False:
                t = _on_miss(key, _MSG.size - _KEY_AT + lex + lrk, offset, ts, p, stamp)
            if t is None:
                append(_general(offset, ts, p, stamp))
                continue
            if type(t) is _Varying:
                shape = t
                size, before, after = t.size, t.before, t.after
        if not low <= offset <= top:  # offsets grow: the width rarely changes within a window
            low, top, tag, pack = _int_width(offset)
            entry = _OFFSET_KEY + tag
        added = entry + pack(offset)
        if stamp:
            added += _STAMP_KEY + write_value(ts)
        if type(t) is tuple:
            ex, rk, pre, table, _, post, heads = t
            head = heads.get(len(added))
            if head is None:  # the properties up to the added entries, per their length
                head = heads[len(added)] = pre + _U32(len(table) + len(added)) + table
            append((ex, rk, head + added + post, p[at:]))
            continue
        value = t.stored.unpack_from(key, t.at)[0]  # the id, as wide as ``write_value`` makes it
        if not vlow <= value <= vtop:  # ids count up: their width rarely changes either
            vlow, vtop, vtag, vpack = _int_width(value)
        spliced = vtag + vpack(value)
        ex, rk, pre, table, tail, post, heads = t.template
        n = len(spliced) + len(added)
        head = heads.get(n)
        if head is None:  # the properties up to the id's value, per the length of what follows
            head = heads[n] = pre + _U32(len(table) + len(tail) + n) + table
        append((ex, rk, head + spliced + tail + added + post, p[at:]))
    return out
