"""Decoding primitives: field tables/arrays (every RabbitMQ type), timestamps, frame headers.

Readers take ``(b, o)`` -- a bytes object and an offset -- and return ``(value, new_offset)``.
They never check bounds one byte at a time: ``Struct.unpack_from`` raises on a short buffer and the
caller compares the final offset with the end of the frame (slices past the end shrink silently,
so an overrun shows up as ``o > end``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size
CONTENT_HEADER = struct.Struct(">HHQ")  # class-id, weight, body size

_U32 = struct.Struct(">I")
_b = struct.Struct(">b")
_s = struct.Struct(">h")
_u = struct.Struct(">H")
_I = struct.Struct(">i")
_l = struct.Struct(">q")
_L = struct.Struct(">Q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_D = struct.Struct(">Bi")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_DEPTH = 64  # deeper nesting is refused (506) instead of risking a RecursionError


class TooDeep(ValueError):
    """Field tables/arrays nested beyond MAX_DEPTH."""


def from_timestamp(v: int) -> datetime | int:
    """POSIX seconds -> aware UTC datetime; values datetime cannot hold stay ints (lossless)."""
    try:
        return _EPOCH + timedelta(seconds=v)
    except OverflowError:
        return v


def _r_t(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return b[o] != 0, o + 1


def _r_b(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _b.unpack_from(b, o)[0], o + 1


def _r_B(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return b[o], o + 1


def _r_s(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _s.unpack_from(b, o)[0], o + 2


def _r_u(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _u.unpack_from(b, o)[0], o + 2


def _r_I(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _I.unpack_from(b, o)[0], o + 4


def _r_i(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _U32.unpack_from(b, o)[0], o + 4


def _r_l(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _l.unpack_from(b, o)[0], o + 8


def _r_L(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _L.unpack_from(b, o)[0], o + 8


def _r_f(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _f.unpack_from(b, o)[0], o + 4


def _r_d(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return _d.unpack_from(b, o)[0], o + 8


def _r_D(b: bytes, o: int, d: int) -> tuple[Any, int]:
    scale, raw = _D.unpack_from(b, o)
    return Decimal(raw).scaleb(-scale), o + 5


def _r_S(b: bytes, o: int, d: int) -> tuple[Any, int]:
    n = _U32.unpack_from(b, o)[0]
    o += 4 + n
    if o > len(b):
        raise ValueError("long string overruns the frame")
    return b[o - n:o].decode("utf-8", "surrogateescape"), o


def _r_x(b: bytes, o: int, d: int) -> tuple[Any, int]:
    n = _U32.unpack_from(b, o)[0]
    o += 4 + n
    if o > len(b):
        raise ValueError("byte array overruns the frame")
    return b[o - n:o], o


def _r_T(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return from_timestamp(_L.unpack_from(b, o)[0]), o + 8


def _r_V(b: bytes, o: int, d: int) -> tuple[Any, int]:
    return None, o


def _r_A(b: bytes, o: int, d: int) -> tuple[Any, int]:
    if d > MAX_DEPTH:
        raise TooDeep("field arrays nested too deeply")
    n = _U32.unpack_from(b, o)[0]
    o += 4
    end = o + n
    if end > len(b):
        raise ValueError("field array overruns the frame")
    out = []
    readers = _READERS
    while o < end:
        v, o = readers[b[o]](b, o + 1, d + 1)
        out.append(v)
    if o != end:
        raise ValueError("field array size does not match its content")
    return out, o


def _r_F(b: bytes, o: int, d: int) -> tuple[Any, int]:
    if d > MAX_DEPTH:
        raise TooDeep("field tables nested too deeply")
    n = _U32.unpack_from(b, o)[0]
    o += 4
    end = o + n
    if end > len(b):
        raise ValueError("field table overruns the frame")
    out = {}
    readers = _READERS
    while o < end:
        k = b[o]
        o += 1 + k
        key = b[o - k:o].decode("utf-8", "surrogateescape")
        out[key], o = readers[b[o]](b, o + 1, d + 1)
    if o != end:
        raise ValueError("field table size does not match its content")
    return out, o


def _unknown(b: bytes, o: int, d: int) -> tuple[Any, int]:
    raise ValueError(f"unknown field value type {b[o - 1]!r}")


# Indexed by the tag byte; unknown tags hit _unknown (a list lookup, no KeyError handling).
_READERS: list[Callable[[bytes, int, int], tuple[Any, int]]] = [_unknown] * 256
for _tag, _fn in {
    "t": _r_t, "b": _r_b, "B": _r_B, "s": _r_s, "u": _r_u, "I": _r_I, "i": _r_i, "l": _r_l,
    "L": _r_L, "f": _r_f, "d": _r_d, "D": _r_D, "S": _r_S, "x": _r_x, "A": _r_A, "T": _r_T,
    "F": _r_F, "V": _r_V,
}.items():
    _READERS[ord(_tag)] = _fn


def read_table(b: bytes, o: int) -> tuple[dict[str, Any], int]:
    """Read a field table (4-byte size + entries) at ``b[o:]``."""
    return _r_F(b, o, 0)


def read_array(b: bytes, o: int) -> tuple[list[Any], int]:
    """Read a field array (4-byte size + values) at ``b[o:]``."""
    return _r_A(b, o, 0)


def read_value(b: bytes, o: int) -> tuple[Any, int]:
    """Read one tagged field value at ``b[o:]``."""
    return _READERS[b[o]](b, o + 1, 0)
