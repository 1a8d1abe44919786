"""RFC 6455 5.3 masking: XOR the payload with the 4-byte key repeated.

Three paths, none with a per-byte Python loop:
- ``mask_int``: one big-int XOR; least call overhead, used for small payloads;
- ``mask_translate``: four strided ``bytes.translate`` passes (one per key byte),
  2-3x faster than big-int XOR from ~1 KB up; the pure-Python path for large payloads;
- ``mask_c``: an optional C accelerator (cffi, 8 bytes per step, ~10x faster at 16 KB),
  ``wsframe._cmask``, compiled at install time (``_mask_build.py``, run by setup.py); nothing
  is compiled at import. Installed without a C compiler (or with ``WSFRAME_PURE_PYTHON=1``)
  it is None, ``ACCELERATOR_ERROR`` says why, and the pure paths are used. The differential
  test checks every path against the definition.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable

__all__ = ["ACCELERATOR_ERROR", "mask", "mask_c", "mask_int", "mask_translate"]

Buffer = bytes | bytearray | memoryview

# _XOR_TABLES[k] maps every byte b to b ^ k; bytes.translate applies it in C.
_XOR_TABLES = [bytes(b ^ k for b in range(256)) for k in range(256)]


def mask_translate(key: bytes, data: Buffer) -> bytes:
    buf = bytearray(data)
    t = _XOR_TABLES
    buf[0::4] = buf[0::4].translate(t[key[0]])
    buf[1::4] = buf[1::4].translate(t[key[1]])
    buf[2::4] = buf[2::4].translate(t[key[2]])
    buf[3::4] = buf[3::4].translate(t[key[3]])
    return bytes(buf)


def mask_int(key: bytes, data: Buffer) -> bytes:
    n = len(data)
    if n == 0:
        return b""
    keystream = (key * ((n >> 2) + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(keystream, "little")).to_bytes(n, "little")


# -- optional C accelerator ------------------------------------------------------------

ACCELERATOR_ERROR: str | None = None  # why mask_c is None, if it is


def _load_accelerator() -> Callable[[bytes, Buffer], bytes] | None:
    """The C masker built at install time (``_mask_build.py`` via setup.py), or None."""
    global ACCELERATOR_ERROR
    if os.environ.get("WSFRAME_PURE_PYTHON"):
        ACCELERATOR_ERROR = "disabled by WSFRAME_PURE_PYTHON"
        return None
    try:
        from ._cmask import ffi, lib  # type: ignore[import-not-found]  # built by setup.py
    except ImportError as exc:  # built without a C compiler (or cffi): the pure paths serve
        ACCELERATOR_ERROR = f"wsframe._cmask not available ({exc}); using pure-Python masking"
        logging.getLogger("wsframe").info("%s", ACCELERATOR_ERROR)
        return None
    wsframe_mask, from_buffer = lib.wsframe_mask, ffi.from_buffer

    def mask_c(key: bytes, data: Buffer) -> bytes:
        n = len(data)
        out = bytearray(n)
        wsframe_mask(key, from_buffer(data), from_buffer(out), n)
        return bytes(out)

    return mask_c


mask_c = _load_accelerator()
_SMALL = 128  # below this big-int XOR has the least overhead of all paths


def mask(key: bytes, data: Buffer) -> bytes:
    if len(data) < _SMALL:
        return mask_int(key, data)
    if mask_c is not None:
        return mask_c(key, data)
    return mask_translate(key, data)
