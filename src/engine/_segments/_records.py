"""On-disk record framing and the message record codec of the segment store.

A record is ``<u32 length><u32 crc32(payload)><payload>``. A message payload is a fixed header
(``_MSG``) then exchange, routing key, pickled headers and the body.
"""

from __future__ import annotations

import math
import pickle
from struct import Struct
from typing import Any
from zlib import crc32

from .._message import Message

SEG_MAGIC = b"SMQSEG1\n"
JRN_MAGIC = b"SMQJRN1\n"
_REC = Struct("<II")  # payload length, crc32(payload)
#: message id, expires_at, ack_timeout (NaN = None), priority, flags, len(exchange), len(key), len(headers)
_MSG = Struct("<QddBBHHI")
_ENQ = Struct("<BIQQ")  # kind, queue id, message id, position
_REM = Struct("<BIQ")  # kind, queue id, message id
_CNT = Struct("<BIQI")  # kind, queue id, message id, delivery count
K_ENQ, K_REM, K_CNT, K_META = 1, 2, 3, 4
_PERSISTENT = 1
NAN = float("nan")

def _record(payload: bytes) -> bytes:
    return _REC.pack(len(payload), crc32(payload)) + payload


def _records(data: bytes | memoryview, start: int) -> tuple[list[tuple[int, memoryview]], int]:
    """Valid records from ``start`` as (offset, payload); also the end of the last valid one."""
    view = memoryview(data)
    out = []
    off, end = start, len(view)
    while off + 8 <= end:
        n, crc = _REC.unpack_from(view, off)
        stop = off + 8 + n
        if stop > end:
            break
        payload = view[off + 8 : stop]
        if crc32(payload) != crc:
            break
        out.append((off, payload))
        off = stop
    return out, off


def _encode_message(msg: Message) -> bytes:
    ex = msg.exchange.encode()
    rk = msg.routing_key.encode()
    hdr = pickle.dumps(msg.headers, 5) if msg.headers else b""
    head = _MSG.pack(
        msg.id,
        NAN if msg.expires_at is None else msg.expires_at,
        NAN if msg.ack_timeout is None else msg.ack_timeout,
        msg.priority,
        _PERSISTENT if msg.persistent else 0,
        len(ex),
        len(rk),
        len(hdr),
    )
    return b"".join((head, ex, rk, hdr, msg.body))


_BODY_SLOT = Message.body  # the slot descriptor, reached past the property below


class _LazyBodyMessage(Message):
    """A recovered message whose body stays in its segment and is read (pread) on each access.

    Only recovered messages are of this class, so the plain ``Message`` path is unchanged."""

    __slots__ = ("_store", "_at", "_len")

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


def _decode_message(p: memoryview, lazy: tuple[Any, int] | None = None) -> Message:
    """``lazy``: (store, absolute position of the payload) to leave the body on disk."""
    mid, exp, ackt, prio, flags, lex, lrk, lhdr = _MSG.unpack_from(p, 0)
    o = _MSG.size
    ex = str(p[o : o + lex], "utf-8")
    o += lex
    rk = str(p[o : o + lrk], "utf-8")
    o += lrk
    headers = pickle.loads(p[o : o + lhdr]) if lhdr else {}
    o += lhdr
    args = (prio, None if math.isnan(exp) else exp, bool(flags & _PERSISTENT), None if math.isnan(ackt) else ackt)
    if lazy is None:
        return Message(mid, ex, rk, headers, bytes(p[o:]), *args)
    msg = _LazyBodyMessage(mid, ex, rk, headers, b"", *args)
    msg._store, msg._at, msg._len = lazy[0], lazy[1] + o, len(p) - o
    return msg
