"""On-disk record framing and the record codecs of the segment store (no pickle: every field has an
explicit encoding, so a data directory never executes code when it is read back).

A record is ``<u32 length><u32 crc32(payload)><payload>``. A message payload is a fixed header
(``_MSG``) then exchange, routing key, the headers as an AMQP field table (or, when a key is longer
than a field-table key may be, a field array of alternating keys and values) and the body. A
journal meta record (entity definitions) is ``K_META``, an op byte, Struct-packed flags/ids, u32
length-prefixed strings and the arguments as a field table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from struct import Struct
from typing import Any, Protocol
from zlib import crc32

from amqpproto import read_array, read_table, write_array, write_table

from ..._message import Message
from ...store_types import BindingDef, ExchangeDef, QueueDef

SEG_MAGIC = b"SMQSEG2\n"
JRN_MAGIC = b"SMQJRN2\n"
_REC = Struct("<II")  # payload length, crc32(payload)
#: message id, expires_at, ack_timeout (NaN = None), priority, flags, len(exchange), len(key), len(headers)
_MSG = Struct("<QddBBHHI")
_ENQ = Struct("<BIQQ")  # kind, queue id, message id, position
_REM = Struct("<BIQ")  # kind, queue id, message id
_CNT = Struct("<BIQI")  # kind, queue id, message id, delivery count
_EXP = Struct("<BIQd")  # kind, queue id, message id, this queue's expiry of the message (x-message-ttl)
#: kind, the segment position the journal covers from here on (written by compaction): every
#: enqueue of a message at a lower position is in the journal (or was removed)
_MARK = Struct("<BQ")
#: kind, the next queue id to give (written by compaction: an id a damaged journal lost stays used)
_NEXTQ = Struct("<BI")
K_ENQ, K_REM, K_CNT, K_META, K_EXP, K_MARK, K_NEXTQ = 1, 2, 3, 4, 5, 6, 7
_PERSISTENT = 1
_HDR_PAIRS = 2  # headers stored as a field array of alternating keys and values
NAN = float("nan")
assert _ENQ.size < _MSG.size and _EXP.size < _MSG.size  # the markers are told from messages by length

# -- journal meta records ----------------------------------------------------------------------
OP_ADD_VHOST, OP_DEL_VHOST, OP_ADD_X, OP_DEL_X, OP_ADD_Q, OP_DEL_Q, OP_ADD_B, OP_DEL_B = range(1, 9)
#: a JSON document (users, permissions, policies): kind, key, doc / kind, key
OP_PUT_DOC, OP_DEL_DOC = 9, 10
_META = Struct("<BBBI")  # kind, op, flags, queue id (add_queue) or 0
_U32 = Struct("<I")
_F_DURABLE, _F_AUTO_DELETE, _F_INTERNAL, _F_DEST_X, _F_ARGS = 1, 2, 4, 8, 16


def _strs(*items: str) -> bytes:
    out = []
    for s in items:
        b = s.encode("utf-8", "surrogateescape")
        out.append(_U32.pack(len(b)))
        out.append(b)
    return b"".join(out)


def encode_meta(op: int, *strs: str, flags: int = 0, qid: int = 0, args: dict[str, Any] | None = None) -> bytes:
    if args is not None:
        flags |= _F_ARGS
    tail = write_table(args) if args is not None else b""
    return _META.pack(K_META, op, flags, qid) + _strs(*strs) + tail


def meta_vhost(op: int, name: str) -> bytes:
    return encode_meta(op, name)


def meta_exchange(x: ExchangeDef) -> bytes:
    flags = (_F_DURABLE if x.durable else 0) | (_F_AUTO_DELETE if x.auto_delete else 0) | (
        _F_INTERNAL if x.internal else 0)
    return encode_meta(OP_ADD_X, x.vhost, x.name, x.type, flags=flags, args=x.args)


def meta_queue(qid: int, q: QueueDef) -> bytes:
    flags = (_F_DURABLE if q.durable else 0) | (_F_AUTO_DELETE if q.auto_delete else 0)
    return encode_meta(OP_ADD_Q, q.vhost, q.name, flags=flags, qid=qid, args=q.args)


def meta_binding(op: int, b: BindingDef) -> bytes:
    return encode_meta(op, b.vhost, b.source, b.dest, b.key, flags=_F_DEST_X if b.dest_is_exchange else 0,
                       args=b.args)


_NSTRS = {OP_ADD_VHOST: 1, OP_DEL_VHOST: 1, OP_ADD_X: 3, OP_DEL_X: 2, OP_ADD_Q: 2, OP_DEL_Q: 2,
          OP_ADD_B: 4, OP_DEL_B: 4, OP_PUT_DOC: 3, OP_DEL_DOC: 2}


def decode_meta(p: bytes) -> tuple[int, list[str], int, int, dict[str, Any] | None]:
    """(op, strings, flags, queue id, args); raises ValueError on a malformed record."""
    _, op, flags, qid = _META.unpack_from(p, 0)
    n = _NSTRS.get(op)
    if n is None:
        raise ValueError(f"unknown journal op {op}")
    o = _META.size
    strs = []
    for _ in range(n):
        (ln,) = _U32.unpack_from(p, o)
        o += 4
        strs.append(p[o : o + ln].decode("utf-8", "surrogateescape"))
        o += ln
    args = read_table(p, o)[0] if flags & _F_ARGS else None
    return op, strs, flags, qid, args


def decode_plain_queue(p: Any) -> tuple[str, str, int] | None:
    """(vhost, name, qid) when ``p`` (bytes or a memoryview) declares a plain queue (durable, no
    auto-delete, no args: most records of a big journal), else None (``decode_meta`` handles it)."""
    if len(p) < _META.size + 8 or p[1] != OP_ADD_Q or p[2] != _F_DURABLE:
        return None
    qid = _U32.unpack_from(p, 3)[0]
    o = _META.size
    (ln,) = _U32.unpack_from(p, o)
    vend = o + 4 + ln
    if vend + 4 > len(p):
        return None
    (ln2,) = _U32.unpack_from(p, vend)
    if vend + 4 + ln2 != len(p):
        return None
    try:
        return (str(p[o + 4 : vend], "utf-8", "surrogateescape"),
                str(p[vend + 4 :], "utf-8", "surrogateescape"), qid)
    except UnicodeDecodeError:
        return None


def meta_to_def(op: int, strs: list[str], flags: int, args: dict[str, Any] | None) -> Any:
    if op == OP_ADD_X:
        return ExchangeDef(strs[0], strs[1], strs[2], bool(flags & _F_DURABLE), bool(flags & _F_AUTO_DELETE),
                           bool(flags & _F_INTERNAL), args)
    if op == OP_ADD_Q:
        return QueueDef(strs[0], strs[1], bool(flags & _F_DURABLE), bool(flags & _F_AUTO_DELETE), args)
    if op in (OP_ADD_B, OP_DEL_B):
        return BindingDef(strs[0], strs[1], strs[2], bool(flags & _F_DEST_X), strs[3], args)
    raise ValueError(f"journal op {op} defines no entity")


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


def is_expiry_marker(p: bytes | memoryview) -> bool:
    """Whether a segment record's payload is a queue's expiry of a message (``_EXP``), written beside
    the message's enqueue marker (``SegmentStore.enqueue_expiring``)."""
    return len(p) == _EXP.size and p[0] == K_EXP


def is_enqueue_marker(p: bytes | memoryview) -> bool:
    """Whether a segment record's payload is an enqueue (``_ENQ``) written beside its message rather
    than a message: a message payload is never this short (``_MSG`` alone is longer)."""
    return len(p) == _ENQ.size and p[0] == K_ENQ


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
    headers = msg.headers
    if headers == _PERSISTENT_ONLY:  # what an AMQP publish with delivery-mode 2 alone leaves
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
        if flags & _HDR_PAIRS:
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
