"""Shared helpers for the stompproto tests."""

from __future__ import annotations

from stompproto import (
    CLIENT,
    NEED_DATA,
    SERVER,
    Abort,
    Ack,
    Begin,
    Commit,
    Connect,
    Connected,
    Connection,
    Disconnect,
    Error,
    Message,
    Nack,
    Receipt,
    RemoteProtocolError,
    Send,
    Subscribe,
    Unsubscribe,
)

CLIENT_FRAMES = (Send, Subscribe, Unsubscribe, Ack, Nack, Begin, Commit, Abort, Disconnect)
SERVER_FRAMES = (Message, Receipt, Error)
ALL_FRAMES = (Connect, Connected, *CLIENT_FRAMES, *SERVER_FRAMES)
VERSIONS = ("1.0", "1.1", "1.2")

# Minimal valid headers per (frame, version); everything the rules require.
_REQ = {
    Send: {"destination": "/queue/a"},
    Subscribe: {"destination": "/queue/a", "id": "0"},
    Unsubscribe: {"id": "0"},
    Begin: {"transaction": "tx1"},
    Commit: {"transaction": "tx1"},
    Abort: {"transaction": "tx1"},
    Disconnect: {},
    Message: {"destination": "/queue/a", "message-id": "m1", "subscription": "0"},
    Receipt: {"receipt-id": "r1"},
    Error: {"message": "boom"},
}


def required(cls, version: str) -> dict[str, str]:
    if cls in (Ack, Nack):
        if version == "1.2":
            return {"id": "a1"}
        if version == "1.1":
            return {"message-id": "m1", "subscription": "0"}
        return {"message-id": "m1"}
    if cls is Connect:
        return {"accept-version": version, "host": "h"}
    if cls is Connected:
        return {"version": version}
    return dict(_REQ[cls])


def valid_frame(cls, version: str):
    return cls(required(cls, version))


def drain(conn) -> list:
    out = []
    while (ev := conn.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def feed(conn, data: bytes, sizes=None, eof: bool = False):
    """Feed ``data`` in pieces (whole if ``sizes`` is None; sizes cycle), draining after
    each; return (events, exception or None)."""
    events: list = []
    if sizes is None:
        pieces = [data] if data else []
    else:
        pieces, i, k = [], 0, 0
        while i < len(data):
            n = max(1, sizes[k % len(sizes)])
            pieces.append(data[i : i + n])
            i += n
            k += 1
    try:
        for p in pieces + ([b""] if eof else []):
            conn.receive_data(p)
            while (ev := conn.next_event()) is not NEED_DATA:
                events.append(ev)
    except RemoteProtocolError as exc:
        return events, exc
    return events, None


def handshake(version: str = "1.2", client_hb=None, server_hb=None, now=None, **limits):
    """A CLIENT and a SERVER connection that completed CONNECT/CONNECTED at ``version``."""
    client = Connection(CLIENT, **limits)
    server = Connection(SERVER, **limits)
    h = {"host": "h"}
    if version != "1.0":
        h["accept-version"] = version
    if client_hb is not None:
        h["heart-beat"] = f"{client_hb[0]},{client_hb[1]}"
    server.receive_data(client.send(Connect(h), now), now)
    (ev,) = drain(server)
    assert isinstance(ev, Connect)
    client.receive_data(server.send(server.connected_frame(heart_beat=server_hb), now), now)
    (ev,) = drain(client)
    assert isinstance(ev, Connected)
    assert client.version == server.version == version
    return client, server


def server_at(version: str, **limits):
    return handshake(version, **limits)[1]


def client_at(version: str, **limits):
    return handshake(version, **limits)[0]


__all__ = [
    "CLIENT", "SERVER", "CLIENT_FRAMES", "SERVER_FRAMES", "ALL_FRAMES", "VERSIONS", "required",
    "valid_frame", "drain", "feed", "handshake", "server_at", "client_at",
]
