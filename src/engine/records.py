"""The record framing and the message codec every store shares: the segment store's segments and
journal, the stream logs' files and the PostgreSQL store's message rows (no pickle: every field has an
explicit encoding, so stored data never executes code when it is read back).

A record is ``<u32 length><u32 crc32(payload)><payload>``. A message payload is a fixed header
(``_MSG``) then exchange, routing key, the headers as an AMQP field table (or, when a key is longer
than a field-table key may be, a field array of alternating keys and values; or, flag
``_AMQP_PROPS``, an AMQP content property list as published, flag word on, which reads back as the
headers ``props_to_headers`` makes of it: a ``RawMessage``'s) and the body. Below
``engine.storage`` and ``engine.streams`` both, so neither imports the other's internals for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from struct import Struct
from typing import Any, Protocol
from zlib import crc32

from amqpproto import read_array, read_table, write_array, write_table

from ._message import EncodedMessage, Message
from ._raw_message import RawMessage, headers_of

_REC = Struct("<II")  # payload length, crc32(payload)
#: message id, expires_at, ack_timeout (NaN = None), priority, flags, len(exchange), len(key), len(headers)
_MSG = Struct("<QddBBHHI")
_PERSISTENT = 1
_HDR_PAIRS = 2  # headers stored as a field array of alternating keys and values
_AMQP_PROPS = 4  # headers stored as the AMQP property list they come from (a RawMessage's)
NAN = float("nan")


class Buffered(Protocol):
    """A file written through a buffer: where its next byte goes and whether it awaits a sync."""

    fd: int
    buf: bytearray
    written: int
    dirty: bool
    #: bytes the last successful fsync covered, and whether a failed fsync since left pages to write again
    synced: int
    rewrite: bool


def write_out(f: Buffered, pwrite: Callable[[int, bytearray, int], int]) -> None:
    """pwrite ``f.buf`` at ``f.written``; on error the unwritten rest stays buffered (the segment
    store and the stream logs share it; ``pwrite`` is theirs, so fault-injection tests can wrap it)."""
    buf = f.buf
    while buf:  # no memoryview: an exception must not leave an export that blocks the resize
        n = pwrite(f.fd, buf, f.written)
        f.written += n
        f.dirty = True
        if n == len(buf):
            buf.clear()
        else:
            del buf[:n]


def rewrite_unsynced(f: Buffered, pread: Callable[[int, int, int], bytes],
                     pwrite: Callable[[int, bytearray, int], int]) -> None:
    """After a failed fsync Linux marks the pages it could not write clean ("fsyncgate"): a retried
    fsync would skip them and report success. So the bytes after the last successful fsync are read
    back from the page cache and written again (dirtying those pages) before the retry's fsync."""
    at = f.synced
    data = bytearray(pread(f.fd, f.written - at, at)) if f.written > at else bytearray()
    while data:
        n = pwrite(f.fd, data, at)
        at += n
        del data[:n]
    f.rewrite = False
    f.dirty = True


def _record(payload: bytes) -> bytes:
    return _REC.pack(len(payload), crc32(payload)) + payload


def _records(data: bytes | memoryview, start: int) -> tuple[list[tuple[int, memoryview]], int]:
    """Valid records from ``start`` as (offset, payload); also the end of the last valid one. A zero
    length ends the records (the zeroed, preallocated tail of a file: every payload is non-empty)."""
    view = memoryview(data)
    out = []
    off, end = start, len(view)
    while off + 8 <= end:
        n, crc = _REC.unpack_from(view, off)
        stop = off + 8 + n
        if stop > end or not n:
            break
        payload = view[off + 8 : stop]
        if crc32(payload) != crc:
            break
        out.append((off, payload))
        off = stop
    return out, off


_PERSISTENT_ONLY = {"persistent": "true"}
_PERSISTENT_TABLE = write_table(_PERSISTENT_ONLY)


def _encode_message(msg: Message) -> bytes:
    ex = msg.exchange.encode()
    rk = msg.routing_key.encode()
    flags = _PERSISTENT if msg.persistent else 0
    hdr = b""
    if type(msg) is RawMessage:  # the properties as published: never decoded on the way in
        hdr = msg.props
        flags |= _AMQP_PROPS
    elif type(msg) is EncodedMessage:  # the firehose's: encoded once when it was traced
        hdr = msg.table
    elif (headers := msg.headers) == _PERSISTENT_ONLY:  # what a publish with delivery-mode 2 alone leaves
        hdr = _PERSISTENT_TABLE
    elif headers:
        try:
            hdr = write_table(msg.headers)
        except ValueError:  # a key longer than 255 bytes (STOMP allows it): alternating pairs
            hdr = write_array([x for kv in msg.headers.items() for x in kv])
            flags |= _HDR_PAIRS
    head = _MSG.pack(
        msg.id,
        NAN if msg.expires_at is None else msg.expires_at,
        NAN if msg.ack_timeout is None else msg.ack_timeout,
        msg.priority,
        flags,
        len(ex),
        len(rk),
        len(hdr),
    )
    return b"".join((head, ex, rk, hdr, msg.body))


_ID = Struct("<Q")
#: templates one ``MessageEncoder`` keeps (distinct exchange/routing key pairs, then it starts over)
_TEMPLATES_MAX = 64


class MessageEncoder:
    """``_encode_message`` for one writer (a stream log, a store) that sees the same few routes:
    a message with no expiry, no ack timeout and no headers but the ``persistent`` marker (what a
    plain AMQP publish leaves) is its id then the template of its route (the rest of ``_MSG``,
    exchange, routing key, headers), the body last. The same bytes as ``_encode_message``
    (``tests/engine/test_records.py``), without packing and joining the constant part each time."""

    __slots__ = ("_templates", "_raw_templates")

    def __init__(self) -> None:
        self._templates: dict[tuple[str, str, int, bool, bool], bytes] = {}
        #: a ``RawMessage``'s: by route, length of its properties and persistence
        self._raw_templates: dict[tuple[str, str, int, bool], bytes] = {}

    def encode(self, msg: Message) -> bytes:
        if type(msg) is RawMessage:  # its template: the route's, ending with its properties' length
            props = msg.props
            raw_key = (msg.exchange, msg.routing_key, len(props), msg.persistent)
            middle = self._raw_templates.get(raw_key)
            if middle is None:
                if len(self._raw_templates) >= _TEMPLATES_MAX:
                    self._raw_templates.clear()
                encoded = _encode_message(RawMessage(0, msg.exchange, msg.routing_key, props, b"", msg.persistent,
                                                     None, None, None))
                middle = self._raw_templates[raw_key] = encoded[_ID.size:len(encoded) - len(props)]
            return b"".join((_ID.pack(msg.id), middle, props, msg.body))
        headers = msg.headers
        if msg.expires_at is not None or msg.ack_timeout is not None or (headers and headers != _PERSISTENT_ONLY):
            return _encode_message(msg)
        key = (msg.exchange, msg.routing_key, msg.priority, msg.persistent, not headers)
        templates = self._templates
        tail = templates.get(key)
        if tail is None:
            if len(templates) >= _TEMPLATES_MAX:
                templates.clear()
            tail = templates[key] = _encode_message(Message(0, *key[:2], headers, b"", key[2], None,
                                                            key[3]))[_ID.size:]
        return b"".join((_ID.pack(msg.id), tail, msg.body))


class MessageDecoder:
    """``_decode_message`` for one reader of records that mostly share their route (a stream's):
    the bytes between the id and the body of the last record with no expiry, no ack timeout and
    no headers but the ``persistent`` marker are kept with what they decode to, and a record that
    repeats them exactly is decoded from that (its id and body read, nothing parsed). The same
    messages as ``_decode_message`` (``tests/engine/test_records.py``)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        #: (the bytes, exchange, routing key, persistent marker, priority, persistent), one
        #: tuple so a reader on another thread never sees a half-replaced pair
        self._last: tuple[bytes, str, str, bool, int, bool] = (b"", "", "", False, 0, False)

    def decode(self, p: bytes | memoryview) -> Message:
        tail, ex, rk, marker, prio, persistent = self._last
        end = _ID.size + len(tail)
        if tail and bytes(p[_ID.size:end]) == tail:
            return Message(_ID.unpack_from(p)[0], ex, rk, {"persistent": "true"} if marker else {}, bytes(p[end:]),
                           prio, None, persistent)
        msg = _decode_message(p)
        headers = msg.headers
        if msg.expires_at is None and msg.ack_timeout is None and (not headers or headers == _PERSISTENT_ONLY):
            self._last = (bytes(p[_ID.size:len(p) - len(msg.body)]), msg.exchange, msg.routing_key, bool(headers),
                          msg.priority, msg.persistent)
        return msg


#: decoded header tables of scalars by their encoding: the records of one stream or queue mostly
#: repeat the same few (``persistent:true``...), so a read decodes each once
_TABLES: dict[bytes, dict[str, Any]] = {}
_TABLES_MAX = 256
_SCALARS = (str, int, bool, float, bytes)


def _read_headers(raw: bytes) -> dict[str, Any]:
    """``read_table`` of a record's headers, each time a dict of the caller's own."""
    table = _TABLES.get(raw)
    if table is not None:
        return dict(table)  # its values are immutable: a shallow copy is a whole copy
    table = read_table(raw, 0)[0]
    if len(raw) <= 256 and all(type(v) in _SCALARS for v in table.values()):
        if len(_TABLES) >= _TABLES_MAX:
            _TABLES.clear()
        _TABLES[raw] = dict(table)
    return table


#: the slot descriptor, reached past the property below
_BODY_SLOT: Any = Message.__dict__["body"]


class _LazyBodyMessage(Message):
    """A recovered message whose body stays in its segment and is read (pread) on each access.

    Only recovered messages are of this class, so the plain ``Message`` path is unchanged."""

    __slots__ = ("_store", "_at", "_len")
    _store: Any
    _at: int
    _len: int

    @property  # type: ignore[override]
    def body(self) -> bytes:
        store = self._store
        if store is None:
            return _BODY_SLOT.__get__(self, Message)  # type: ignore[no-any-return]
        return store._read_body(self._at, self._len)

    @body.setter
    def body(self, value: bytes) -> None:
        _BODY_SLOT.__set__(self, value)
        self._store = None


def _decode_message(p: bytes | memoryview, lazy: tuple[Any, int] | None = None) -> Message:
    """``lazy``: (store, absolute position of the payload) to leave the body on disk."""
    mid, exp, ackt, prio, flags, lex, lrk, lhdr = _MSG.unpack_from(p, 0)
    o = _MSG.size
    ex = str(p[o : o + lex], "utf-8")
    o += lex
    rk = str(p[o : o + lrk], "utf-8")
    o += lrk
    headers: dict[str, Any] = {}
    if lhdr:
        raw = bytes(p[o : o + lhdr])
        if flags & _AMQP_PROPS:
            headers = headers_of(raw)
        elif flags & _HDR_PAIRS:
            items = read_array(raw, 0)[0]
            headers = dict(zip(items[::2], items[1::2], strict=False))
        else:
            headers = _read_headers(raw)
    o += lhdr
    args = (prio, None if math.isnan(exp) else exp, bool(flags & _PERSISTENT), None if math.isnan(ackt) else ackt)
    if lazy is None:
        return Message(mid, ex, rk, headers, bytes(p[o:]), *args)
    msg = _LazyBodyMessage(mid, ex, rk, headers, b"", *args)
    msg._store, msg._at, msg._len = lazy[0], lazy[1] + o, len(p) - o
    return msg
