"""Bounded resources before login (issue 23 item 4), on the engine with its injected clock: the
handshake deadline (``Limits.handshake_timeout``, RabbitMQ's ``handshake_timeout``) on every
protocol, the small frame limit until the client has logged in
(``Limits.max_frame_size_unauthenticated``), and received-but-unfinished bytes counted by the memory
alarm. The same over real sockets: tests/e2e/test_e2e_handshake.py."""

from __future__ import annotations

import logging
import random

import pytest
from test_engine_session_freed import (
    AMQP_OPEN,
    AMQP_PARTIAL,
    AMQP_PUBLISH,
    STOMP_CONNECT,
    UPGRADE_AMQP,
    UPGRADE_STOMP,
    ws_frame,
)

import amqpproto as A
from amqpproto import spec
from engine import Broker, Close, Config, Limits, MemoryStore, PauseReading, ResumeReading, Write

PEER = ("127.0.0.1", 40000)
T0 = 1000.0


def broker(**limits: int) -> Broker:
    return Broker(Config(limits=Limits(**limits)), MemoryStore(), random.Random(1))


def written(actions: list) -> bytes:
    return b"".join(a.data for a in actions if isinstance(a, Write))


def closed(actions: list, conn_id: int = 1) -> bool:
    return Close(conn_id) in actions


def fire(b: Broker, now: float) -> list:
    b.handle_timer(now)
    return b.drain()


# -- the handshake deadline -----------------------------------------------------------------------
@pytest.mark.parametrize("protocol, opening", [
    ("stomp", b""),  # silent
    ("stomp", b"CONNECT\naccept-version:1.2\n"),  # a CONNECT that never ends
    ("amqp", b""),
    ("amqp", b"AMQP\x00\x00\x09\x01"),  # the header, then no start-ok
    ("ws", b""),
    ("ws", UPGRADE_STOMP[:40]),  # half an upgrade request
    ("ws", UPGRADE_STOMP),  # upgraded, no STOMP CONNECT
    ("ws", UPGRADE_AMQP),  # upgraded, no AMQP header
])
def test_a_connection_that_does_not_log_in_is_closed_at_the_deadline(
        protocol: str, opening: bytes, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sansmq.engine")
    b = broker(handshake_timeout=2000)
    b.connection_made(1, protocol, PEER, T0)
    if opening:
        b.data_received(1, opening, T0 + 0.5)
    out = b.drain()
    assert not closed(out) and b.get_timer() is not None
    assert not closed(fire(b, T0 + 1.9))
    out = fire(b, T0 + 2.0)
    if protocol == "ws" and opening.endswith(b"\r\n\r\n"):
        # the inner session says why (STOMP ERROR; AMQP just closes, as RabbitMQ) and the
        # WebSocket Close follows; the TCP close waits for the client's Close, bounded
        assert b"\x88" in written(out)  # a Close frame
        out += fire(b, T0 + 10)
    assert closed(out)
    if protocol == "stomp" or (protocol == "ws" and opening == UPGRADE_STOMP):
        assert b"ERROR\nmessage:Handshake timeout" in written(out)
    assert 1 not in b.sessions
    [line] = [r.getMessage() for r in caplog.records if "handshake" in r.getMessage()]
    assert "connection 1 (127.0.0.1:40000" in line and "handshake not finished within 2 s" in line


def amqp_client_open(b: Broker, now: float, conn_id: int = 1, protocol: str = "amqp") -> None:
    b.connection_made(conn_id, protocol, PEER, now)
    b.data_received(conn_id, AMQP_OPEN, now)


@pytest.mark.parametrize("protocol", ["stomp", "amqp", "ws-stomp", "ws-amqp"])
def test_a_logged_in_connection_has_no_deadline(protocol: str) -> None:
    b = broker(handshake_timeout=2000)
    if protocol == "stomp":
        b.connection_made(1, "stomp", PEER, T0)
        b.data_received(1, STOMP_CONNECT.replace(b"1.2", b"1.0"), T0 + 1.5)  # no heart-beats
    elif protocol == "amqp":
        amqp_client_open(b, T0)
    else:
        b.connection_made(1, "ws", PEER, T0)
        inner = AMQP_OPEN if protocol == "ws-amqp" else STOMP_CONNECT.replace(b"1.2", b"1.0")
        b.data_received(1, (UPGRADE_AMQP if protocol == "ws-amqp" else UPGRADE_STOMP) + ws_frame(inner), T0 + 1)
    assert not closed(b.drain())
    assert not closed(fire(b, T0 + 3600)) and 1 in b.sessions


def test_no_deadline_when_handshake_timeout_is_0() -> None:
    b = broker(handshake_timeout=0)
    b.connection_made(1, "stomp", PEER, T0)
    assert b.get_timer() is None and not closed(fire(b, T0 + 3600))


def test_the_deadline_runs_from_the_accept_through_the_upgrade() -> None:
    """The upgrade does not restart the clock: upgrade and login together get handshake_timeout."""
    b = broker(handshake_timeout=2000)
    b.connection_made(1, "ws", PEER, T0)
    b.data_received(1, UPGRADE_STOMP, T0 + 1.5)
    b.drain()
    assert b"ERROR\nmessage:Handshake timeout" in written(fire(b, T0 + 2.0))


# -- the frame limit before login ------------------------------------------------------------------
def test_a_large_stomp_frame_before_connected_is_refused_early() -> None:
    b = broker()  # max_frame_size_unauthenticated: 8192
    b.connection_made(1, "stomp", PEER, T0)
    b.data_received(1, b"CONNECT\nlogin:guest\npasscode:guest\ncontent-length:16000000\n\n" + b"x" * 9000, T0)
    out = b.drain()
    assert closed(out) and written(out).startswith(b"ERROR\n")
    # without a content-length the cap is found by the scan for the NUL
    b.connection_made(2, "stomp", PEER, T0)
    b.data_received(2, b"CONNECT\nlogin:guest\n\n" + b"x" * 9000, T0)
    assert closed(b.drain(), 2)


def test_after_connected_the_configured_frame_size_applies() -> None:
    b = broker()
    b.connection_made(1, "stomp", PEER, T0)
    body = b"y" * 100_000
    b.data_received(1, STOMP_CONNECT + b"SEND\ndestination:/queue/big\nreceipt:r\n\n" + body + b"\0", T0)
    out = written(b.drain())
    assert out.startswith(b"CONNECTED") and b"RECEIPT\nreceipt-id:r" in out
    assert b.model.vhosts["/"].queues["big"].count == 1


def test_a_large_amqp_frame_before_tune_ok_is_a_frame_error() -> None:
    """RabbitMQ takes frames of at most FRAME_MIN_SIZE (8192 since 4.0.8) before tune-ok."""
    b = broker()
    b.connection_made(1, "amqp", PEER, T0)
    client = A.Connection(A.CLIENT)
    b.data_received(1, client.send(A.ProtocolHeader()), T0)
    client.receive_data(written(b.drain()))
    assert isinstance(client.next_event(), spec.ConnectionStart)
    # a method frame announcing 10,000 payload bytes (our client codec would refuse to send it):
    # the frame header alone decides
    b.data_received(1, b"\x01\x00\x00" + (10_000).to_bytes(4, "big"), T0)
    out = b.drain()
    assert closed(out) and b"FRAME_ERROR - frame of 10" in written(out)


def test_a_large_websocket_message_before_login_is_a_1009() -> None:
    b = broker()
    b.connection_made(1, "ws", PEER, T0)
    b.data_received(1, UPGRADE_STOMP, T0)
    b.drain()
    b.data_received(1, ws_frame(b"CONNECT\n" + b"x" * 9000)[:100], T0)
    out = written(b.drain())
    assert b"\x88" in out and (1009).to_bytes(2, "big") in out
    # once logged in, a message may be as large as a frame
    b.connection_made(2, "ws", PEER, T0)
    b.data_received(2, UPGRADE_STOMP + ws_frame(STOMP_CONNECT), T0)
    b.data_received(2, ws_frame(b"SEND\ndestination:/queue/w\n\n" + b"z" * 100_000 + b"\0"), T0)
    assert not closed(b.drain(), 2) and b.model.vhosts["/"].queues["w"].count == 1


# -- unfinished input and the memory alarm ----------------------------------------------------------
def publisher(b: Broker, conn_id: int) -> None:
    """A STOMP connection that has published once (so the memory alarm blocks it)."""
    b.connection_made(conn_id, "stomp", PEER, T0)
    b.data_received(conn_id, STOMP_CONNECT + b"SEND\ndestination:/queue/p\n\nm\0", T0)


def test_a_half_received_amqp_body_counts_for_the_memory_alarm() -> None:
    """The alarm blocks the publishers; the sender of the unfinished message is read to its end (as
    RabbitMQ, which blocks a connection at its next publish), so its bytes become a queued message
    instead of holding the alarm on for good; it is blocked at its next publish."""
    b = broker(memory_high_watermark=10_000)
    b.model.declare_queue(b.model.vhosts["/"], "q")
    publisher(b, 2)
    amqp_client_open(b, T0)
    b.drain()
    assert b.inbound_bytes == 0 and not b.mem_alarm
    b.data_received(1, AMQP_PARTIAL, T0)  # 20,000 bytes of a 100,000-byte publish
    out = b.drain()
    assert b.inbound_bytes >= 15_000 and b.mem_alarm
    assert PauseReading(2) in out and PauseReading(1) not in out
    b.data_received(1, AMQP_PUBLISH[len(AMQP_PARTIAL):], T0)
    out = b.drain()
    assert b.inbound_bytes == 0 and b.model.vhosts["/"].queues["q"].count == 1
    assert PauseReading(1) in out  # it published while the alarm is on


@pytest.mark.parametrize("protocol", ["stomp", "ws"])
def test_unfinished_input_of_connections_not_logged_in_counts_too(protocol: str) -> None:
    """Strangers' unfinished logins hold memory too (each bounded by the pre-login frame limit and
    the handshake deadline): they count, and the publishers are blocked."""
    b = broker(memory_high_watermark=20_000)
    publisher(b, 9)
    for conn_id in range(1, 5):
        b.connection_made(conn_id, protocol, PEER, T0)
        if protocol == "ws":
            b.data_received(conn_id, UPGRADE_STOMP, T0)
            b.data_received(conn_id, ws_frame(b"CONNECT\n" + b"h" * 8000)[:6000], T0)
        else:
            b.data_received(conn_id, b"CONNECT\nlogin:guest\n" + b"h" * 6000, T0)
    out = b.drain()
    assert b.inbound_bytes >= 24_000 and b.mem_alarm and PauseReading(9) in out
    for conn_id in range(1, 5):
        b.connection_lost(conn_id, T0 + 1)
    out = b.drain()
    assert b.inbound_bytes == 0 and not b.mem_alarm and ResumeReading(9) in out


def test_half_an_upgrade_request_is_counted_until_it_is_parsed_or_gone() -> None:
    b = broker()
    b.connection_made(1, "ws", PEER, T0)
    b.data_received(1, UPGRADE_STOMP[:40], T0)
    assert b.inbound_bytes == 40
    b.data_received(1, UPGRADE_STOMP[40:], T0)
    assert b.inbound_bytes == 0  # answered: nothing held
    b.connection_made(2, "ws", PEER, T0)
    b.data_received(2, UPGRADE_STOMP[:40], T0)
    b.connection_lost(2, T0)
    assert b.inbound_bytes == 0
