"""permessage-deflate (RFC 7692): negotiation and the per-direction (de)compressors."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

__all__ = [
    "Deflater",
    "Inflater",
    "MessageTooBig",
    "PerMessageDeflate",
    "client_accept",
    "client_offer",
    "parse_extension_items",
    "server_negotiate",
]

EXTENSION_NAME = "permessage-deflate"
_TAIL = b"\x00\x00\xff\xff"  # the empty stored block every sync flush ends with (7.2.1)
_PARAMS = frozenset(
    {"server_no_context_takeover", "client_no_context_takeover", "server_max_window_bits", "client_max_window_bits"}
)


@dataclass(slots=True, frozen=True)
class PerMessageDeflate:
    """Either the local wishes/limits (Connection argument) or the agreed parameters
    (``Connection.extension``). Window bits are 8..15."""

    server_no_context_takeover: bool = False
    client_no_context_takeover: bool = False
    server_max_window_bits: int = 15
    client_max_window_bits: int = 15

    def __post_init__(self) -> None:
        for bits in (self.server_max_window_bits, self.client_max_window_bits):
            if not 8 <= bits <= 15:
                raise ValueError(f"max_window_bits must be 8..15, not {bits}")


class MessageTooBig(Exception):
    """Decompressed output passed the message size limit."""


# -- header parsing -----------------------------------------------------------------


def parse_extension_items(value: str) -> list[str]:
    """Split a (comma-joined) Sec-WebSocket-Extensions value into its items."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _parse_item(item: str) -> tuple[str, dict[str, str | None]]:
    """``name; a; b=1`` -> (name, {a: None, b: "1"}); ValueError if malformed or repeated."""
    name, *raw_params = (part.strip() for part in item.split(";"))
    params: dict[str, str | None] = {}
    for raw in raw_params:
        key, eq, val = raw.partition("=")
        key = key.strip().lower()
        if not key or key in params:
            raise ValueError(f"bad or repeated extension parameter {raw!r}")
        val = val.strip()
        if len(val) >= 2 and val[0] == val[-1] == '"':
            val = val[1:-1]
        params[key] = val if eq else None
    return name.lower(), params


def _bits(value: str | None, *, optional: bool) -> int | None:
    if value is None:
        if optional:
            return None
        raise ValueError("max_window_bits needs a value")
    if not (value.isdigit() and len(value) <= 2 and 8 <= int(value) <= 15):
        raise ValueError(f"bad max_window_bits {value!r}")
    return int(value)


def _flag(value: str | None) -> bool:
    if value is not None:
        raise ValueError("no_context_takeover takes no value")
    return True


# -- negotiation ----------------------------------------------------------------------


def server_negotiate(offers: list[str], config: PerMessageDeflate) -> tuple[str, PerMessageDeflate] | None:
    """Pick the first acceptable permessage-deflate offer: (response item, agreed params)."""
    for offer in offers:
        try:
            name, params = _parse_item(offer)
            if name != EXTENSION_NAME or not params.keys() <= _PARAMS:
                continue
            snct = "server_no_context_takeover" in params and _flag(params["server_no_context_takeover"])
            cnct = "client_no_context_takeover" in params and _flag(params["client_no_context_takeover"])
            s_bits = (_bits(params.get("server_max_window_bits"), optional=False)
                      if "server_max_window_bits" in params else None)
            c_offered = "client_max_window_bits" in params
            c_bits = _bits(params.get("client_max_window_bits"), optional=True) if c_offered else None
        except ValueError:
            continue  # RFC 7692 5: decline an invalid offer, try the next one
        agreed = PerMessageDeflate(
            server_no_context_takeover=snct or config.server_no_context_takeover,
            client_no_context_takeover=cnct or config.client_no_context_takeover,
            server_max_window_bits=min(s_bits or 15, config.server_max_window_bits),
            # we may only limit the client's window if it said it can be limited
            client_max_window_bits=min(c_bits or 15, config.client_max_window_bits) if c_offered else 15,
        )
        parts = [EXTENSION_NAME]
        if agreed.server_no_context_takeover:
            parts.append("server_no_context_takeover")
        if agreed.client_no_context_takeover:
            parts.append("client_no_context_takeover")
        if s_bits is not None or agreed.server_max_window_bits < 15:
            parts.append(f"server_max_window_bits={agreed.server_max_window_bits}")
        if c_offered and (c_bits is not None or agreed.client_max_window_bits < 15):
            parts.append(f"client_max_window_bits={agreed.client_max_window_bits}")
        return "; ".join(parts), agreed
    return None


def client_offer(config: PerMessageDeflate) -> str:
    parts = [EXTENSION_NAME]
    if config.server_no_context_takeover:
        parts.append("server_no_context_takeover")
    if config.client_no_context_takeover:
        parts.append("client_no_context_takeover")
    if config.server_max_window_bits < 15:
        parts.append(f"server_max_window_bits={config.server_max_window_bits}")
    # always say our window can be limited (browsers do the same)
    if config.client_max_window_bits < 15:
        parts.append(f"client_max_window_bits={config.client_max_window_bits}")
    else:
        parts.append("client_max_window_bits")
    return "; ".join(parts)


def client_accept(items: list[str], config: PerMessageDeflate) -> PerMessageDeflate | None:
    """Check the server's extension response against our offer; ValueError if it breaks it."""
    if not items:
        return None
    if len(items) > 1:
        raise ValueError(f"server accepted extensions we did not offer: {items!r}")
    name, params = _parse_item(items[0])
    if name != EXTENSION_NAME or not params.keys() <= _PARAMS:
        raise ValueError(f"server accepted an extension we did not offer: {items[0]!r}")
    s_bits = _bits(params.get("server_max_window_bits"), optional=False) if "server_max_window_bits" in params else 15
    c_bits = _bits(params.get("client_max_window_bits"), optional=False) if "client_max_window_bits" in params else None
    if s_bits is not None and s_bits > config.server_max_window_bits:
        raise ValueError("server_max_window_bits above what we offered")
    if c_bits is not None and c_bits > config.client_max_window_bits:
        raise ValueError("client_max_window_bits above what we offered")
    snct = "server_no_context_takeover" in params and _flag(params["server_no_context_takeover"])
    cnct = "client_no_context_takeover" in params and _flag(params["client_no_context_takeover"])
    if config.server_no_context_takeover and not snct:
        raise ValueError("server dropped server_no_context_takeover")
    return PerMessageDeflate(
        server_no_context_takeover=snct,
        client_no_context_takeover=cnct or config.client_no_context_takeover,
        server_max_window_bits=s_bits or 15,
        client_max_window_bits=min(c_bits or 15, config.client_max_window_bits),
    )


# -- the codec ------------------------------------------------------------------------


class Deflater:
    """Compresses outgoing messages. A window of 8 bits cannot be produced by zlib's raw
    deflate, so ``enabled`` is False then and messages go out uncompressed (allowed: RSV1 is
    per message)."""

    __slots__ = ("_obj", "_reset", "_wbits", "enabled")

    def __init__(self, max_window_bits: int, no_context_takeover: bool) -> None:
        self._wbits = max_window_bits
        self._reset = no_context_takeover
        self._obj: zlib._Compress | None = None
        self.enabled = max_window_bits >= 9

    def compress(self, data: bytes, fin: bool) -> bytes:
        obj = self._obj
        if obj is None:
            obj = self._obj = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -self._wbits)
        out = obj.compress(data) + obj.flush(zlib.Z_SYNC_FLUSH)
        if fin:
            out = out[:-4]  # a sync flush always ends with _TAIL; 7.2.1 strips it
            if self._reset:
                self._obj = None
        return out


class Inflater:
    """Decompresses incoming messages with a hard output cap (zlib ``max_length``)."""

    __slots__ = ("_obj", "_reset")

    def __init__(self, no_context_takeover: bool) -> None:
        self._reset = no_context_takeover
        self._obj: zlib._Decompress | None = None

    def inflate(self, data: bytes, fin: bool, limit: int) -> bytes:
        """Inflate one frame's payload; at most ``limit`` bytes may come out.

        Raises MessageTooBig, or zlib.error / ValueError for corrupt data.
        """
        obj = self._obj
        if obj is None:
            # a 15-bit window decodes any smaller negotiated window too
            obj = self._obj = zlib.decompressobj(-15)
        if obj.eof:
            raise ValueError("data after the end of the deflate stream")
        out = obj.decompress(data, limit + 1)
        if len(out) > limit:
            raise MessageTooBig
        if fin:
            if not obj.eof:
                out += obj.decompress(_TAIL, limit - len(out) + 1)
                if len(out) > limit:
                    raise MessageTooBig
            if self._reset or obj.eof:
                self._obj = None
        return out
