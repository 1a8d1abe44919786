"""Packing a block of u64s (message ids or positions, ascending as a rule) into a few bytes and back,
without a Python loop per value: deltas and prefix sums are computed on the block read as one big
integer, the deltas' bytes are split into eight planes (all low bytes, then all second bytes, ...)
and the planes zlib-compressed. Consecutive ids and equal-sized records pack to almost nothing (a
block of 4096 ids and positions to ~150 bytes); random record sizes to ~1.3 bytes per entry."""

from __future__ import annotations

import sys
import zlib
from array import array

_BO = sys.byteorder  # array('Q').tobytes() is in the machine's byte order


def _deltas(values: array[int]) -> bytes:
    """Each value minus the one before it (the first as it is), modulo 2**64: the block as one
    integer ``x`` of 64-bit limbs, ``x - (x << 64)`` (a negative delta borrows, and is undone exactly)."""
    n = len(values)
    x = int.from_bytes(values.tobytes(), _BO)
    return ((x - (x << 64)) & ((1 << (64 * n)) - 1)).to_bytes(8 * n, _BO)


def _prefix_sums(deltas: bytes | bytearray, n: int) -> array[int]:
    """Inverse of ``_deltas``: prefix sums by doubling (log2(n) shifts-and-adds of the whole block)."""
    mask = (1 << (64 * n)) - 1
    s = int.from_bytes(deltas, _BO)
    shift = 64
    while shift < 64 * n:
        s = (s + (s << shift)) & mask
        shift *= 2
    out = array("Q")
    out.frombytes(s.to_bytes(8 * n, _BO))
    return out


def pack(*columns: array[int]) -> bytes:
    """Equal-length columns of u64s as one compressed blob (see ``unpack``)."""
    planes: list[bytes] = []
    for col in columns:
        d = _deltas(col)
        planes.extend(d[k::8] for k in range(8))
    return zlib.compress(b"".join(planes), 6)


def unpack(blob: bytes, n: int, ncolumns: int) -> list[array[int]]:
    """The ``ncolumns`` columns of ``n`` values each that ``pack`` made ``blob`` from."""
    raw = zlib.decompress(blob)
    out = []
    for c in range(ncolumns):
        d = bytearray(8 * n)
        base = c * 8 * n
        for k in range(8):  # eight slice copies per column, not a loop per value
            d[k::8] = raw[base + k * n : base + (k + 1) * n]
        out.append(_prefix_sums(d, n))
    return out
