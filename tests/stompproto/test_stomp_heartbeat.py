"""Heart-beat negotiation (spec "Heart-beating") and timers driven by a fake ``now``."""

from __future__ import annotations

import itertools

import pytest
from stomp_helpers import feed, handshake

from stompproto import (
    CLIENT,
    NEED_DATA,
    SERVER,
    Connect,
    Connection,
    Heartbeat,
    HeartbeatDue,
    LocalProtocolError,
    PeerTimedOut,
    RemoteProtocolError,
    Send,
    negotiate_heartbeat,
    parse_heartbeat,
)

PERIODS = (0, 500, 2000)


@pytest.mark.parametrize(("cx", "cy", "sx", "sy"), list(itertools.product(PERIODS, repeat=4)))
def test_negotiation_matrix(cx, cy, sx, sy):
    c2s = max(cx, sy) if cx and sy else 0
    s2c = max(sx, cy) if sx and cy else 0
    assert negotiate_heartbeat((cx, cy), (sx, sy)) == (c2s, s2c)
    client, server = handshake("1.2", client_hb=(cx, cy), server_hb=(sx, sy), now=0.0)
    assert client.heartbeat == (c2s, s2c)
    assert server.heartbeat == (s2c, c2s)
    if not c2s and not s2c:
        assert client.get_timer() is None and server.get_timer() is None


def test_absent_header_means_zero():
    client, server = handshake("1.1", now=0.0)
    assert client.heartbeat == server.heartbeat == (0, 0)
    assert parse_heartbeat(None) == (0, 0)
    assert parse_heartbeat("10, 20") == (10, 20)


@pytest.mark.parametrize("bad", ["", "10", "a,b", "-1,0", "1,2,3", "1;2", "١,٢"])
def test_malformed_heartbeat_header(bad):
    with pytest.raises(ValueError):
        parse_heartbeat(bad)
    with pytest.raises(LocalProtocolError):
        Connection(CLIENT).send(Connect({"accept-version": "1.2", "heart-beat": bad}))
    wire = f"CONNECT\naccept-version:1.2\nheart-beat:{bad}\n\n\x00".encode()
    events, err = feed(Connection(SERVER), wire)
    assert isinstance(err, RemoteProtocolError) and err.hint is not None
    # and in CONNECTED, seen by the client
    client = Connection(CLIENT)
    client.send(Connect({"accept-version": "1.2", "host": "h"}))
    events, err = feed(client, f"CONNECTED\nversion:1.2\nheart-beat:{bad}\n\n\x00".encode())
    assert isinstance(err, RemoteProtocolError)


def _drain(conn):
    out = []
    while (ev := conn.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def test_timers_with_fake_clock():
    # client can send every 1s and wants 2s; server can send every 0.5s and wants 1s.
    client, server = handshake("1.2", client_hb=(1000, 2000), server_hb=(500, 1000), now=10.0)
    assert client.heartbeat == (1000, 2000) and server.heartbeat == (2000, 1000)
    # server: send due at 12.0, peer (client, every 1s) timed out at 10 + 1 * 1.5
    assert server.get_timer() == pytest.approx(11.5)
    server.handle_timer(11.0)
    assert _drain(server) == []
    # data from the client refreshes liveness
    server.receive_data(b"\n", now=11.2)
    assert server.get_timer() == pytest.approx(12.0)
    server.handle_timer(12.0)
    assert _drain(server) == [HeartbeatDue(), Heartbeat()]
    assert server.get_timer() == pytest.approx(12.7)  # liveness 11.2 + 1.5
    server.handle_timer(12.7)
    assert _drain(server) == [PeerTimedOut()]
    # HeartbeatDue only once per period; sending moves the deadline
    assert server.get_timer() == pytest.approx(14.0)
    server.handle_timer(13.0)
    assert _drain(server) == []
    assert server.send(Heartbeat(), now=13.0) == b"\n"
    assert server.get_timer() == pytest.approx(15.0)
    # any frame counts as a heart-beat for the client
    assert client.get_timer() == pytest.approx(11.0)
    client.send(Send({"destination": "/a"}), now=10.9)
    assert client.get_timer() == pytest.approx(11.9)
    client.handle_timer(11.9)
    assert _drain(client) == [HeartbeatDue()]
    # liveness towards the server: 10.0 + 2 * 1.5
    assert client.get_timer() == pytest.approx(12.9)
    client.handle_timer(13.0)
    assert _drain(client) == [HeartbeatDue(), PeerTimedOut()]
    # no timers once closed
    client.receive_data(b"")
    _drain(client)
    assert client.get_timer() is None


def test_grace_factor_is_configurable():
    client = Connection(CLIENT)
    server = Connection(SERVER, heartbeat_grace=3.0)
    server.receive_data(client.send(Connect({"accept-version": "1.2", "host": "h", "heart-beat": "1000,0"}), 0.0), 0.0)
    _drain(server)
    client.receive_data(server.send(server.connected_frame(heart_beat=(0, 1000)), 0.0), 0.0)
    _drain(client)
    assert server.get_timer() == pytest.approx(3.0)


def test_no_clock_no_timer():
    client, server = handshake("1.2", client_hb=(1000, 1000), server_hb=(1000, 1000))
    assert server.heartbeat == (1000, 1000) and server.get_timer() is None
    server.receive_data(b"\n", now=5.0)
    assert server.get_timer() == pytest.approx(6.5)
