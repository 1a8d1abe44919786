"""Encoding primitives: field tables/arrays, timestamps, frames.

Python value -> wire type: bool ``t``; int the smallest of ``b s u I i l L`` that holds it (the
order pamqp uses, so tables encode byte-identically); float ``d`` (lossless); Decimal ``D``; str
``S``; bytes/bytearray/memoryview ``x``; datetime ``T``; dict ``F``; list/tuple ``A``; None ``V``.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ._readers import FRAME_HEADER

_U32 = struct.Struct(">I")
_b = struct.Struct(">cb")
_s = struct.Struct(">ch")
_u = struct.Struct(">cH")
_I = struct.Struct(">ci")
_i = struct.Struct(">cI")
_l = struct.Struct(">cq")
_L = struct.Struct(">cQ")
_d = struct.Struct(">cd")
_D = struct.Struct(">cBi")
_T = struct.Struct(">cQ")

FRAME_END = b"\xce"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"
_pack_frame_header = FRAME_HEADER.pack


def to_timestamp(v: datetime | int) -> int:
    """datetime (naive = UTC) or int seconds -> int seconds."""
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=UTC)
        return int(v.timestamp())
    return v


def as_bytes(v: bytes | bytearray | memoryview | str) -> bytes:
    """longstr method fields are bytes; str is accepted and UTF-8 encoded."""
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    return bytes(v)


def _int(v: int) -> bytes:
    if -128 <= v <= 127:
        return _b.pack(b"b", v)
    if -32768 <= v <= 32767:
        return _s.pack(b"s", v)
    if 0 <= v <= 65535:
        return _u.pack(b"u", v)
    if -2147483648 <= v <= 2147483647:
        return _I.pack(b"I", v)
    if 0 <= v <= 4294967295:
        return _i.pack(b"i", v)
    if -9223372036854775808 <= v <= 9223372036854775807:
        return _l.pack(b"l", v)
    if 0 <= v <= 18446744073709551615:
        return _L.pack(b"L", v)
    raise ValueError(f"integer {v} does not fit a field table type")


def _decimal(v: Decimal) -> bytes:
    sign, digits, exp = v.as_tuple()
    if not isinstance(exp, int):
        raise ValueError(f"cannot encode {v} as a decimal")
    if exp > 0:
        scale, mantissa = 0, int(v)
    else:
        scale, mantissa = -exp, int(v.scaleb(-exp))
    if not 0 <= scale <= 255 or not -2147483648 <= mantissa <= 2147483647:
        raise ValueError(f"decimal {v} out of range")
    return _D.pack(b"D", scale, mantissa)


def write_value(v: Any) -> bytes:
    """One tagged field value."""
    t = type(v)
    if t is str:
        e: bytes = v.encode("utf-8", "surrogateescape")
        return b"S" + _U32.pack(len(e)) + e
    if t is bool:
        return b"t\x01" if v else b"t\x00"
    if t is int:
        return _int(v)
    if t is dict:
        return b"F" + write_table(v)
    if v is None:
        return b"V"
    if t is float:
        return _d.pack(b"d", v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        return b"x" + _U32.pack(len(b)) + b
    if isinstance(v, (list, tuple)):
        return b"A" + write_array(v)
    if isinstance(v, datetime):
        return _T.pack(b"T", to_timestamp(v))
    if isinstance(v, Decimal):
        return _decimal(v)
    if isinstance(v, bool):
        return b"t\x01" if v else b"t\x00"
    if isinstance(v, int):
        return _int(int(v))
    if isinstance(v, str):
        return write_value(str(v))
    if isinstance(v, dict):
        return b"F" + write_table(v)
    if isinstance(v, float):
        return _d.pack(b"d", v)
    raise TypeError(f"cannot encode {type(v).__name__} in a field table")


def write_table(d: dict[str, Any]) -> bytes:
    """A field table: 4-byte size + (shortstr key, tagged value)*, in dict order."""
    if not d:
        return b"\x00\x00\x00\x00"
    parts = []
    for k, v in d.items():
        kb = k.encode("utf-8", "surrogateescape")
        parts.append(bytes((len(kb),)))
        parts.append(kb)
        parts.append(write_value(v))
    body = b"".join(parts)
    return _U32.pack(len(body)) + body


def write_array(a: list[Any] | tuple[Any, ...]) -> bytes:
    """A field array: 4-byte size + tagged values."""
    body = b"".join([write_value(v) for v in a])
    return _U32.pack(len(body)) + body


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One complete frame."""
    return _pack_frame_header(frame_type, channel, len(payload)) + payload + FRAME_END
