"""The segment store's own record codecs: journal entries (enqueue, remove, delivery count, expiry,
markers) and journal meta records (entity definitions: ``K_META``, an op byte, Struct-packed
flags/ids, u32 length-prefixed strings and the arguments as a field table). The record framing and
the message codec they sit in are ``engine.records``, shared with the stream logs.
"""

from __future__ import annotations

from struct import Struct
from typing import Any

from amqpproto import read_table, write_table

from ...records import _MSG
from ...store_types import BindingDef, ExchangeDef, QueueDef

SEG_MAGIC = b"SMQSEG2\n"
JRN_MAGIC = b"SMQJRN2\n"
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


def is_expiry_marker(p: bytes | memoryview) -> bool:
    """Whether a segment record's payload is a queue's expiry of a message (``_EXP``), written beside
    the message's enqueue marker (``SegmentStore.enqueue_expiring``)."""
    return len(p) == _EXP.size and p[0] == K_EXP


def is_enqueue_marker(p: bytes | memoryview) -> bool:
    """Whether a segment record's payload is an enqueue (``_ENQ``) written beside its message rather
    than a message: a message payload is never this short (``_MSG`` alone is longer)."""
    return len(p) == _ENQ.size and p[0] == K_ENQ
