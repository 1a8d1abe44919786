"""Fuzz harness for wsframe (atheris).

Input layout: byte 0 picks the connection mode, byte 1 seeds the chunking, the rest is the
peer's bytes. Invariants: only RemoteProtocolError escapes next_event, never a re-typed bug of
ours; the error's hint can be sent; feeding the bytes in chunks yields the same events (and error) as feeding them whole.

    python fuzz/wsframe_fuzz.py -runs=20000 fuzz/corpus/wsframe
    python fuzz/wsframe_fuzz.py --write-seeds fuzz/corpus/wsframe   # regenerate the seeds
"""
from __future__ import annotations

import contextlib
import random
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

try:
    import atheris
except ImportError:  # the pytest smoke test runs without it
    atheris = None

_instrument = atheris.instrument_imports() if atheris is not None and __name__ == "__main__" else contextlib.nullcontext()
with _instrument:
    from wsframe import (
        CLIENT,
        NEED_DATA,
        SERVER,
        AcceptConnection,
        Connection,
        PerMessageDeflate,
        RejectConnection,
        RemoteProtocolError,
        Request,
    )

FIXED_NONCE = b"\x00" * 16  # the client's Sec-WebSocket-Key is then AAAAAAAAAAAAAAAAAAAAAA==


def _server_handshake() -> Connection:
    return Connection(SERVER, max_handshake_size=4096, max_message_size=1 << 16)


def _server_deflate() -> Connection:
    return Connection(SERVER, handshake=False, permessage_deflate=PerMessageDeflate(), max_message_size=1 << 16)


def _client_frames() -> Connection:
    return Connection(CLIENT, handshake=False, permessage_deflate=None, rng=lambda n: b"\x00" * n)


def _server_fragments() -> Connection:
    return Connection(
        SERVER, handshake=False, permessage_deflate=None, deliver_fragments=True, max_frame_size=1000, max_message_size=4000
    )


def _client_handshake() -> Connection:
    conn = Connection(CLIENT, rng=lambda n: b"\x00" * n, max_handshake_size=4096)
    conn.send(Request(host="localhost", path="/ws", subprotocols=["v12.stomp", "v11.stomp"]))
    return conn


MODES: list[Callable[[], Connection]] = [_server_handshake, _server_deflate, _client_frames, _server_fragments, _client_handshake]


def run(conn: Connection, chunks: list[bytes]) -> list:
    """Feed chunks then EOF, collecting events; a RemoteProtocolError ends the run."""
    events: list = []
    try:
        for chunk in [*chunks, b""]:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not NEED_DATA:
                events.append(event)
                if isinstance(event, Request):
                    # accept like a broker would, so the framing layer gets the rest
                    conn.send(AcceptConnection(subprotocol=event.subprotocols[0] if event.subprotocols else None))
                if isinstance(event, RejectConnection) or getattr(event, "code", None) == 1006:
                    return events
    except RemoteProtocolError as exc:
        if exc.__cause__ is not None:  # a bug of ours, re-typed with the internal-error hint
            raise AssertionError(f"internal error: {exc}") from exc
        events.append(("error", exc.hint))
        if exc.hint is not None:
            conn.send(exc.hint)  # must be accepted in the failed state
    return events


def split(data: bytes, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    top = 1 + seed % 64
    chunks, i = [], 0
    while i < len(data):
        n = rnd.randint(1, top)
        chunks.append(data[i : i + n])
        i += n
    return chunks


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    make = MODES[data[0] % len(MODES)]
    payload = data[2:]
    whole = run(make(), [payload])
    chunked = run(make(), split(payload, data[1]))
    assert whole == chunked, (whole, chunked)


def TestOneInput(data: bytes) -> None:  # noqa: N802 (atheris naming)
    check(data)


# -- seeds --------------------------------------------------------------------------------

def _frame(opcode: int, payload: bytes, fin: bool = True, rsv1: bool = False, key: bytes | None = b"\x11\x22\x33\x44") -> bytes:
    b0 = (0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode
    n = len(payload)
    m = 0x80 if key else 0
    head = struct.pack("!BB", b0, m | n) if n < 126 else struct.pack("!BBH", b0, m | 126, n) if n < 65536 else struct.pack("!BBQ", b0, m | 127, n)
    if not key:
        return head + payload
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return (c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]


def seeds() -> dict[str, bytes]:
    request = (
        b"GET /ws HTTP/1.1\r\nHost: localhost:15674\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: v12.stomp, v11.stomp\r\nOrigin: http://localhost\r\n"
        b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
    )
    stomp = b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00"
    frames = _frame(1, stomp) + _frame(9, b"ping") + _frame(8, struct.pack("!H", 1000) + b"bye")
    fragmented = _frame(1, "h\xe9".encode()[:2], fin=False) + _frame(10, b"") + _frame(0, "h\xe9".encode()[2:] + b"llo") + _frame(2, bytes(300))
    compressed = _frame(1, _deflate(b"SEND\ndestination:/queue/a\n\nhello\x00" * 3), rsv1=True) + _frame(2, _deflate(bytes(5000)), rsv1=True)
    from wsframe import accept_key

    key = accept_key(__import__("base64").b64encode(FIXED_NONCE))
    response = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + key + b"\r\n"
        b"Sec-WebSocket-Protocol: v12.stomp\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n\r\n"
    )
    unmasked = _frame(1, b"CONNECTED\nversion:1.2\n\n\x00", key=None) + _frame(9, b"hb", key=None) + _frame(8, b"", key=None)
    return {
        "server-handshake": bytes([0, 7]) + request + frames,
        "server-handshake-bad": bytes([0, 3]) + request.replace(b"13", b"12"),
        "server-plain-http": bytes([0, 9]) + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "server-deflate": bytes([1, 5]) + compressed + frames,
        "client-frames": bytes([2, 11]) + unmasked + _frame(1, b"x" * 200, key=None),
        "server-fragments": bytes([3, 2]) + fragmented + frames,
        "server-bad-utf8": bytes([3, 1]) + _frame(1, b"\xce", fin=False) + _frame(0, b"\xff"),
        "client-handshake": bytes([4, 13]) + response + _frame(1, _deflate(b"MESSAGE\n\nhi\x00"), rsv1=True, key=None) + unmasked,
        "client-rejected": bytes([4, 4]) + b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--write-seeds":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for name, data in seeds().items():
            (out / name).write_bytes(data)
        return
    if atheris is None:
        sys.exit("atheris is not installed")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
