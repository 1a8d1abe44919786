"""A closed connection's session, codec and receive buffer are freed at once by reference counting,
never left to the cyclic GC (issue 23 item 5: the codec kept the raised RemoteProtocolError with its
traceback, whose frames held the session and its buffer; four rounds of 10 connections dropping
mid-frame left RSS at 885 MB until a collection ran).

Each case runs with the cyclic GC off and holds weak references to the session, its codec and the
codec's receive buffer (the inner session's too over WebSocket), after a drop in the middle of a
frame and after a protocol error."""

from __future__ import annotations

import gc
import logging
import random
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import amqpproto as A
from amqpproto import spec
from engine import Broker, Config, MemoryStore

UPGRADE = (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
UPGRADE_AMQP = UPGRADE + b"Sec-WebSocket-Protocol: amqp\r\n\r\n"
UPGRADE_STOMP = UPGRADE + b"\r\n"


def broker() -> Broker:
    return Broker(Config(), MemoryStore(), random.Random(1))


def ws_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """A masked client frame (an all-zero mask: the payload goes as it is)."""
    n = len(payload)
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else (
        bytes([0x80 | 127]) + n.to_bytes(8, "big"))
    return bytes([0x80 | opcode]) + size + b"\0\0\0\0" + payload


STOMP_CONNECT = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"
#: a SEND announcing 100,000 body bytes of which 5,000 arrive
STOMP_PARTIAL = b"SEND\ndestination:/queue/q\ncontent-length:100000\n\n" + b"x" * 5000
STOMP_BAD = b"BOGUS\n\n\0"


def amqp_bytes(busy: bool = False) -> tuple[bytes, bytes, bytes]:
    """A client's handshake up to an open channel (recorded against a throwaway broker, whose
    answers the client codec needs; ``busy``: then a consumer on a queue of its own with a
    message delivered and not acked, on a channel in confirm mode), a 100,000-byte publish to
    queue "q", and a frame without its frame-end octet (a fatal framing error)."""
    b = broker()
    b.connection_made(1, "amqp", ("127.0.0.1", 40000), 1.0)
    client = A.Connection(A.CLIENT)
    sent: list[bytes] = []

    def say(event: Any) -> None:
        data = client.send(event)
        sent.append(data)
        b.data_received(1, data, 1.0)
        for action in b.drain():
            client.receive_data(getattr(action, "data", b"") or b"")
        while client.next_event() is not A.NEED_DATA:
            pass

    say(A.ProtocolHeader())
    say(spec.ConnectionStartOk({}, "PLAIN", A.plain_response("guest", "guest"), "en_US"))
    say(spec.ConnectionTuneOk(2047, 131072, 0))
    say(spec.ConnectionOpen("/"))
    say(spec.ChannelOpen(channel=1))
    if busy:
        say(spec.ConfirmSelect(channel=1))
        say(spec.QueueDeclare(queue="busy", channel=1))
        say(spec.BasicConsume(queue="busy", consumer_tag="c", channel=1))
        say(spec.BasicPublish(routing_key="busy", body=b"unacked", channel=1))
    publish = client.send(spec.BasicPublish(routing_key="q", body=b"y" * 100_000, channel=1))
    return b"".join(sent), publish, b"\x01\x00\x01\x00\x00\x00\x04\x00\x14\x00\x28\x00"


AMQP_OPEN, AMQP_PUBLISH, AMQP_BAD = amqp_bytes()
AMQP_BUSY = amqp_bytes(busy=True)[0]
#: a STOMP client with a subscription holding an unacked message and an open transaction
STOMP_BUSY = (b"SUBSCRIBE\ndestination:/queue/busy\nid:s\nack:client\n\n\0"
              b"SEND\ndestination:/queue/busy\n\nunacked\0BEGIN\ntransaction:t\n\n\0"
              b"SEND\ndestination:/queue/busy\ntransaction:t\n\nin tx\0")
#: the first 20,000 bytes of AMQP_PUBLISH
AMQP_PARTIAL = AMQP_PUBLISH[:20_000]

#: case -> (protocol, bytes that open the connection, then bytes that leave a frame unfinished,
#: then bytes that are a protocol error)
CASES: dict[str, tuple[str, list[bytes], bytes, bytes]] = {
    "stomp": ("stomp", [STOMP_CONNECT], STOMP_PARTIAL, STOMP_BAD),
    "amqp": ("amqp", [AMQP_OPEN], AMQP_PARTIAL, AMQP_BAD),
    "ws-stomp": ("ws", [UPGRADE_STOMP, ws_frame(STOMP_CONNECT)], ws_frame(STOMP_PARTIAL)[:3000],
                 ws_frame(b"x", 0x3)),  # a reserved opcode: WebSocket Close 1002
    "ws-stomp-inner": ("ws", [UPGRADE_STOMP, ws_frame(STOMP_CONNECT)], ws_frame(STOMP_PARTIAL),
                       ws_frame(STOMP_BAD)),  # STOMP ERROR inside, then Close
    "ws-amqp-inner": ("ws", [UPGRADE_AMQP, ws_frame(AMQP_OPEN)], ws_frame(AMQP_PARTIAL), ws_frame(AMQP_BAD)),
    # with consumers, unacked deliveries, confirms, a transaction: what the model holds of them
    "stomp-busy": ("stomp", [STOMP_CONNECT, STOMP_BUSY], STOMP_PARTIAL, STOMP_BAD),
    "amqp-busy": ("amqp", [AMQP_BUSY], AMQP_PARTIAL, AMQP_BAD),
    "ws-stomp-busy": ("ws", [UPGRADE_STOMP, ws_frame(STOMP_CONNECT), ws_frame(STOMP_BUSY)],
                      ws_frame(STOMP_PARTIAL), ws_frame(STOMP_BAD)),
}


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def open_session(broker: Broker, protocol: str, opening: list[bytes], now: float = 1.0) -> Any:
    broker.connection_made(1, protocol, ("127.0.0.1", 40000), now)
    for data in opening:
        broker.data_received(1, data, now)
    broker.drain()
    session = broker.sessions[1]
    assert not session.closed and (getattr(session, "inner", session) or session).vhost is not None
    return session


def weak_parts(session: Any) -> dict[str, weakref.ref[Any]]:
    """Weak references to the session and to what holds its received bytes."""
    out: dict[str, weakref.ref[Any]] = {"session": weakref.ref(session)}
    for name, obj in (("", session), ("inner ", getattr(session, "inner", None))):
        if obj is None:
            continue
        out[name + "session"] = weakref.ref(obj)
        codec = getattr(obj, "conn", None) or getattr(obj, "ws", None)
        for part, holder in (("codec", codec), ("buffer", getattr(codec, "_buf", None))):
            try:
                out[name + part] = weakref.ref(holder)
            except TypeError:  # slotted without __weakref__ (wsframe's): its owner stands for it
                pass
    return out


def alive(parts: dict[str, weakref.ref[Any]]) -> list[str]:
    return [name for name, ref in parts.items() if ref() is not None]


@pytest.mark.parametrize("how", ["dropped-mid-frame", "protocol-error"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_closed_session_is_freed_without_the_cyclic_gc(case: str, how: str, no_gc: None) -> None:
    """Dropped in the middle of a frame (the peer's FIN there is a protocol error of its own), or
    closed by the broker on a protocol error; then the socket is gone."""
    protocol, opening, partial, bad = CASES[case]
    b = broker()
    session = open_session(b, protocol, opening)
    b.data_received(1, partial if how == "dropped-mid-frame" else bad, 2.0)
    parts = weak_parts(session)
    del session
    if how == "dropped-mid-frame":
        b.data_received(1, b"", 2.5)
    b.drain()
    b.connection_lost(1, 3.0)
    b.drain()
    assert alive(parts) == []


def test_a_session_closed_on_an_internal_error_is_freed_and_the_error_kept_as_text(
        no_gc: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Broker.internal_errors`` keeps the last 100 bugs met: with their live tracebacks they held
    the sessions concerned (and their buffers) until 100 more came."""
    from engine.stomp import session as stomp_session
    from stompproto import Send

    def boom(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setitem(stomp_session._HANDLERS, Send, boom)
    # pytest's log capture keeps each record, exc_info and all, for the report: not the broker's doing
    monkeypatch.setattr(logging.getLogger("sansmq.engine"), "disabled", True)
    b = broker()
    session = open_session(b, "stomp", [STOMP_CONNECT])
    b.data_received(1, b"SEND\ndestination:/queue/q\n\nx\0", 2.0)
    assert session.closed
    parts = weak_parts(session)
    del session
    b.drain()
    b.connection_lost(1, 3.0)
    assert alive(parts) == []
    [exc] = b.internal_errors
    assert exc.__traceback__ is None and "in boom" in "".join(exc.__notes__)
