"""Shared test helpers: raw frame building, feeding modes, event normalisation."""
from __future__ import annotations

import random
import struct

import wsproto.events as wpe
from wsproto.connection import Connection as WPConnection
from wsproto.connection import ConnectionState as WPState
from wsproto.connection import ConnectionType

from wsframe import (
    CLIENT,
    NEED_DATA,
    BytesMessage,
    CloseConnection,
    Connection,
    Ping,
    Pong,
    RemoteProtocolError,
    TextMessage,
)
from wsframe._mask import mask_int

MASK_KEY = b"\x37\xfa\x21\x3d"


def frame(opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0, key: bytes | None = MASK_KEY, length_form: int | None = None) -> bytes:
    """A raw frame; ``key=None`` leaves it unmasked; ``length_form`` forces 7/16/64-bit lengths."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    m = 0x80 if key is not None else 0
    form = length_form or (7 if n < 126 else 16 if n < 65536 else 64)
    if form == 7:
        head = struct.pack("!BB", b0, m | n)
    elif form == 16:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BBQ", b0, m | 127, n)
    if key is None:
        return head + payload
    return head + key + mask_int(key, payload)


def close_payload(code: int, reason: bytes = b"") -> bytes:
    return struct.pack("!H", code) + reason


def random_chunks(data: bytes, seed: int = 0, max_chunk: int = 17) -> list[bytes]:
    rnd = random.Random(seed)
    chunks, i = [], 0
    while i < len(data):
        n = rnd.randint(1, max_chunk)
        chunks.append(data[i : i + n])
        i += n
    return chunks


def chunkings(data: bytes, seed: int = 0) -> list[list[bytes]]:
    """The three feeding modes: whole, byte by byte, random chunks."""
    return [[data], [data[i : i + 1] for i in range(len(data))], random_chunks(data, seed)]


def drain(conn: Connection, chunks: list[bytes] | None = None, eof: bool = False) -> list:
    """Feed ``chunks`` (pulling events after each), then EOF; events, with a trailing
    ('error', code) if a RemoteProtocolError stopped the stream."""
    out: list = []
    try:
        for chunk in chunks or [b""[:0]]:
            if chunk:
                conn.receive_data(chunk)
            while (ev := conn.next_event()) is not NEED_DATA:
                out.append(ev)
        if eof:
            conn.receive_data(b"")
            while (ev := conn.next_event()) is not NEED_DATA:
                out.append(ev)
                if isinstance(ev, CloseConnection) and ev.code == 1006:
                    break
    except RemoteProtocolError as exc:
        out.append(("error", exc.hint.code if isinstance(exc.hint, CloseConnection) else exc.hint))
    return out


def normalise(events: list) -> list:
    """Join message fragments, map to comparable tuples (wsframe or wsproto events)."""
    out: list = []
    pending: list = []
    for ev in events:
        if isinstance(ev, (TextMessage, wpe.TextMessage, BytesMessage, wpe.BytesMessage)):
            pending.append(ev.data)
            if ev.message_finished:
                kind = "text" if isinstance(ev.data, str) else "bytes"
                out.append((kind, ("" if kind == "text" else b"").join(pending)))
                pending = []
        elif isinstance(ev, (Ping, wpe.Ping)):
            out.append(("ping", bytes(ev.payload)))
        elif isinstance(ev, (Pong, wpe.Pong)):
            out.append(("pong", bytes(ev.payload)))
        elif isinstance(ev, (CloseConnection, wpe.CloseConnection)):
            out.append(("close", int(ev.code), ev.reason))
        else:
            out.append(ev)
    return out


def wsproto_events(role, data: bytes) -> list:
    """What wsproto (post-handshake, no extensions) makes of ``data``, up to and including
    the first Close; a parse failure ends the list with ('error', code) like ``drain``."""
    conn = WPConnection(ConnectionType.CLIENT if role is CLIENT else ConnectionType.SERVER)
    conn.receive_data(data)
    result: list = []
    for ev in conn.events():
        if isinstance(ev, wpe.CloseConnection):
            # a real Close moves wsproto's state; a parse failure yields a Close without doing so
            if conn.state is WPState.OPEN:
                result.append(("error", int(ev.code)))
            else:
                result.append(ev)
            break
        result.append(ev)
    return result


def until_close(events: list) -> list:
    """Truncate a normalised event list after its first close or error."""
    for i, ev in enumerate(events):
        if isinstance(ev, tuple) and ev[0] in ("close", "error"):
            return events[: i + 1]
    return events
