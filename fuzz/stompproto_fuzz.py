"""Fuzz harness for stompproto (atheris).

Invariants checked by ``check(data)``:
* only RemoteProtocolError escapes ``next_event``, and never a re-typed bug of ours (internal error);
* feeding the input whole, byte by byte, or in pseudo-random chunks yields the same
  events and the same outcome (error or not);
* in the server role, the error's hint (an ERROR frame) can always be sent.

The first byte picks the role (even: SERVER; odd: CLIENT that already sent CONNECT).
Smoke run:  python fuzz/stompproto_fuzz.py -runs=20000 fuzz/corpus/stompproto
"""

from __future__ import annotations

import random
import sys
import zlib

LIMITS = dict(max_frame_size=4096, max_header_count=16, max_header_line=256, max_body_size=2048)


def _imports():
    import stompproto

    return stompproto


def _new_conn(sp, role_byte: int):
    if role_byte % 2 == 0:
        return sp.Connection(sp.SERVER, **LIMITS)
    conn = sp.Connection(sp.CLIENT, **LIMITS)
    conn.send(sp.Connect({"accept-version": "1.0,1.1,1.2", "host": "h", "heart-beat": "10,10"}))
    return conn


def _drain(sp, conn, out: list) -> bool:
    """Append events to ``out`` until NEED_DATA; True if a RemoteProtocolError was raised."""
    while True:
        try:
            ev = conn.next_event()
        except sp.RemoteProtocolError as exc:
            if exc.__cause__ is not None:  # a bug of ours, re-typed with the internal-error hint
                raise AssertionError(f"internal error: {exc}") from exc
            if exc.hint is not None:
                assert conn.our_role is sp.SERVER
                data = conn.send(exc.hint)
                assert data.startswith(b"ERROR\n") and data.endswith(b"\x00")
            return True
        if ev is sp.NEED_DATA:
            return False
        out.append(ev)
        if type(ev) is sp.Connect and conn.role is sp.SERVER:
            conn.send(conn.connected_frame(heart_beat=(0, 0)))  # accept, to reach CONNECTED


def run(data: bytes, chunks: list[int] | None):
    """Feed ``data[1:]`` (whole when ``chunks`` is None), then EOF; return (events, errored)."""
    sp = _imports()
    conn = _new_conn(sp, data[0] if data else 0)
    payload = data[1:]
    events: list = []
    if chunks is None:
        pieces = [payload] if payload else []
    else:
        pieces, i = [], 0
        for size in chunks:
            if i >= len(payload):
                break
            pieces.append(payload[i : i + size])
            i += size
        if i < len(payload):
            pieces.append(payload[i:])
    for piece in pieces:
        conn.receive_data(piece)
        if _drain(sp, conn, events):
            return events, True
    conn.receive_data(b"")
    errored = _drain(sp, conn, events)
    if not errored:
        assert conn.next_event() is sp.NEED_DATA  # ConnectionClosed only once
    return events, errored


def check(data: bytes) -> None:
    whole = run(data, None)
    assert run(data, [1] * len(data)) == whole, "byte-by-byte differs from whole"
    rng = random.Random(zlib.crc32(data))
    chunks = [rng.randint(1, 64) for _ in range(len(data))]
    assert run(data, chunks) == whole, "random chunks differ from whole"


def main() -> None:
    import atheris

    with atheris.instrument_imports():
        _imports()
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
